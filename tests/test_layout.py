"""The destination's shape: train_gpt2.py reads top to bottom, and the top-level files
import one way."""

import ast
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from helpers import ROOT

# Part 0; the modules a long run needs; the tools around the run
FOLDERS = ("part0", "longrun", "tools")
# the project's modules by their dotted names: the root's scripts, and each folder's modules
SCRIPTS = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in [
        *ROOT.glob("*.py"),
        *(p for f in FOLDERS for p in (ROOT / f).glob("*.py") if p.stem != "__init__"),
    ]
)
# the scripts that use the trainer's own code, or read its flags
BUILT_ON_TRAIN = {
    "hellaswag",
    "tools.preflight",
    "tools.sample",
    "tools.export_hf",
    "tools.reproduce",
    "tools.report_card",
}


def imports(name):
    """The project's modules that `name` imports, anywhere in it (a function's
    import counts too)."""
    found = set()
    for node in ast.walk(ast.parse((ROOT / (name.replace(".", "/") + ".py")).read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found & set(SCRIPTS)


def test_nothing_imports_the_trainer_but_the_scripts_built_on_it():
    importers = {name for name in SCRIPTS if "train_gpt2" in imports(name)}
    assert importers == BUILT_ON_TRAIN


def test_the_files_import_one_way():
    graph = {name: imports(name) for name in SCRIPTS}

    def reaches(start, goal, seen=()):
        return any(
            n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph[start]
        )

    assert [name for name in SCRIPTS if reaches(name, name)] == []


def test_training_never_imports_datasets():
    """Reading a shard folder's manifest goes through manifest.py: the trainer starts
    without datasets' second."""
    code = (
        "import sys, train_gpt2; "
        "print(sorted(m for m in ('datasets', 'fineweb') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_everything_train_calls_is_defined_above_it():
    tree = ast.parse((ROOT / "train_gpt2.py").read_text())
    defined = {
        node.name: node.lineno
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    } | {
        t.id: node.lineno
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if hasattr(t, "id")
    }
    train = next(
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "train"
    )
    used = {n.id for n in ast.walk(train) if isinstance(n, ast.Name) and n.id in defined}
    below = sorted(name for name in used if defined[name] > train.lineno)
    assert used and below == []
    # and what they call in turn: nothing train() reaches is defined below it
    callers = [
        node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in used
    ]
    reached = {
        n.id for c in callers for n in ast.walk(c) if isinstance(n, ast.Name) and n.id in defined
    }
    assert sorted(name for name in reached if defined[name] > train.lineno) == []


def test_the_root_shows_the_architecture():
    """The root holds the program, its data and eval, and folders that say what they hold: at
    most 16 entries."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {path.split("/")[0] for path in tracked}
    assert {"train_gpt2.py", "fineweb.py", "hellaswag.py", *FOLDERS} <= top and len(top) <= 16, (
        sorted(top)
    )
    assert sorted(p.name for p in ROOT.glob("*.py")) == [
        "fineweb.py",
        "hellaswag.py",
        "train_gpt2.py",
    ]


def test_a_steps_checkout_runs_its_own_modules_beside_an_editable_install(series_history, tmp_path):
    """The project is installed editable from this tree (the README's `pip install -e`); in a
    checkout of a Part II step, its scripts import that step's own modules, and the install makes
    none of them importable elsewhere."""
    installs = [
        d.read_text("direct_url.json") for d in importlib.metadata.distributions(name="build-gpt2")
    ]
    # (the source tree's egg-info has none)
    installed = [json.loads(url) for url in installs if url]
    assert [(i["url"], i["dir_info"].get("editable")) for i in installed] == [(ROOT.as_uri(), True)]
    step = tmp_path / "step-49"
    tar = subprocess.run(
        ["git", "archive", "step-49"], cwd=series_history, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(step, filter="data")
    # each says where it was loaded from
    for module in ("train_gpt2.py", "longrun/common.py", "tools/preflight.py"):
        with open(step / module, "a") as f:
            f.write("\nprint('loaded', __file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for command in (["-m", "tools.preflight", "--help"], ["train_gpt2.py", "--help"]):
        out = subprocess.run(
            [sys.executable, *command], cwd=step, env=env, capture_output=True, text=True
        ).stdout
        loaded = sorted(
            line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("loaded ")
        )
        assert loaded and all(
            Path(path).resolve().is_relative_to(step.resolve()) for path in loaded
        ), out
    code = (
        "import walkthrough, importlib.util as u; "
        "print([u.find_spec(m) for m in ('train_gpt2', 'longrun', 'tools')])"
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert elsewhere.stdout.strip() == "[None, None, None]", elsewhere.stdout + elsewhere.stderr


def test_the_readme_is_short_and_its_links_lead_somewhere():
    """The README is one page (at most 250 lines); every file it or a docs/ page links to exists,
    and so does every heading a link names (GitHub's anchors: lower case, spaces to dashes, other
    punctuation dropped)."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name} links to {target}, which does not exist"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
                anchors = {
                    re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings
                }
                assert anchor in anchors, f"{page.name} links to {target}: no such heading"
