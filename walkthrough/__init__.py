"""Follow the series step by step: the diff beside its narration.

Model (plain Python, no Textual): diff.py parses diffs; history.py reads any repository's
first-parent history as steps; rows.py lays a step's diff (or a whole file) out as the rows the diff
pane shows; patches.py builds steps/ into a repository tagged step-NN, exports it back and checks
it; bookmark.py remembers the step you were on; gitcmd.py is the one place git runs. Reader: app.py
(navigation state and keys), widgets.py (drawing only), walkthrough.tcss (the looks). cli.py ties
them together and knows this project's files.
"""
