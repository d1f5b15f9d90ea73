"""`python -m walkthrough.checks TREE SLUG...`: run checks inside TREE, one JSON line per check on
stdout. The reader and `walkthrough exercise` run this in a process of its own, a fork of a process
that imported torch already, as if it were started so (see walkthrough.checks.run)."""

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

tree = Path(sys.argv[1]).resolve()
os.chdir(tree)
sys.path.insert(0, str(tree))  # the tree's train_gpt2.py, not any other

from walkthrough.checks import CHECKS  # noqa: E402
from walkthrough.checks.core import Tree, describe  # noqa: E402

folder = Tree(tree)
passed = True
for slug in sys.argv[2:]:
    start = time.perf_counter()
    try:
        # what the learner's code prints is not the verdict
        with contextlib.redirect_stdout(io.StringIO()):
            CHECKS[slug].function(folder)
        ok, message = True, ""
    except (Exception, SystemExit) as error:
        # the learner's code may raise (or exit): it is the answer, not a crash
        ok, message = False, describe(error, tree)
    result = {
        "slug": slug,
        "ok": ok,
        "message": message,
        "seconds": round(time.perf_counter() - start, 2),
    }
    print(json.dumps(result), flush=True)
    passed = passed and ok
folder.close(passed)
