"""The destination's shape: train_gpt2.py reads top to bottom, and the top-level files import one way."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.stem for p in ROOT.glob("*.py"))
# the scripts that use the trainer's own code, or read its flags
BUILT_ON_TRAIN = {"hellaswag", "preflight", "sample", "export_hf", "reproduce", "report_card"}


def imports(name):
    """The top-level files that `name`.py imports, anywhere in it (a function's import counts too)."""
    found = set()
    for node in ast.walk(ast.parse((ROOT / f"{name}.py").read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found & set(SCRIPTS)


def test_nothing_imports_the_trainer_but_the_scripts_built_on_it():
    importers = {name for name in SCRIPTS if "train_gpt2" in imports(name)}
    assert importers == BUILT_ON_TRAIN


def test_the_files_import_one_way():
    graph = {name: imports(name) for name in SCRIPTS}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph[start])

    assert [name for name in SCRIPTS if reaches(name, name)] == []


def test_training_never_imports_datasets():
    """Reading a shard folder's manifest goes through manifest.py: the trainer starts without datasets' second."""
    code = "import sys, train_gpt2; print(sorted(m for m in ('datasets', 'fineweb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_everything_train_calls_is_defined_above_it():
    tree = ast.parse((ROOT / "train_gpt2.py").read_text())
    defined = {node.name: node.lineno for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {
        t.id: node.lineno
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if hasattr(t, "id")
    }
    train = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "train")
    used = {n.id for n in ast.walk(train) if isinstance(n, ast.Name) and n.id in defined}
    below = sorted(name for name in used if defined[name] > train.lineno)
    assert used and below == []
    # and what they call in turn: nothing train() reaches is defined below it
    callers = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in used]
    reached = {n.id for c in callers for n in ast.walk(c) if isinstance(n, ast.Name) and n.id in defined}
    assert sorted(name for name in reached if defined[name] > train.lineno) == []
