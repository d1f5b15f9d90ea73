"""Follow the series step by step: the diff beside its narration.

Model (plain Python, no Textual): diff.py parses diffs; history.py reads any repository's first-parent history
as steps; series.py builds steps/ into a repository tagged step-NN, exports it back and checks it; bookmark.py
remembers the step you were on; gitcmd.py is the one place git runs; demo.py writes a small series from Python
data. Reader: app.py (navigation state and keys), widgets.py (drawing only), walkthrough.tcss (the looks).
cli.py ties them together.
"""
