"""Every step of the series (steps/) built into a history, and every narration held to its word.

Each step's **Try it** is run exactly as written, in a checkout of that step, on CPU and offline;
its output must match the narration's **What you should see** block (the rules are in
walkthrough/narration.py). What needs the network in real life runs against the local stand-ins the
narration names on its **Stand-in** line.
"""

import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from helpers import ROOT
from try_it import make_stand_ins, run
from walkthrough.cli import check_series as check
from walkthrough.cli import main as walkthrough_main
from walkthrough.history import PART, parts_of
from walkthrough.narration import TRY_IT, read
from walkthrough.patches import read_steps

STEPS = ROOT / "steps"
PATCHES = read_steps(STEPS)
N_STEPS = len(PATCHES)

# CHECK_STEPS=3,7 runs only those steps' Try-its (handy while editing one step); all of
# them by default
ONLY = {int(n) for n in os.environ.get("CHECK_STEPS", "").split(",") if n.strip()}


def checkout(history: Path, n: int, folder: Path) -> Path:
    tar = subprocess.run(
        ["git", "archive", f"step-{n:02d}"], cwd=history, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(folder, filter="data")
    return folder


# once a process, as conftest.py's series_history: with pytest-xdist a process runs this file's
# tests between others'
@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    return make_stand_ins(tmp_path_factory.mktemp("stand-ins"), ROOT / "input.txt")


def test_series_is_sound():
    assert check(STEPS, ROOT) == []


@pytest.mark.parametrize(
    "patch", PATCHES, ids=lambda p: p.subject.split(":")[0].replace(" ", "-").lower()
)
def test_narration_has_every_part(patch):
    read(patch.narration)  # a Try it block, a What-you-should-see block, stand-ins labelled as such
    assert "**Requires**" in patch.narration, "no **Requires** line"
    # the checks split the commands themselves; a learner pastes them into bash, which must accept
    # them as written
    block = TRY_IT.search(patch.narration).group(1)
    parsed = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
    assert parsed.returncode == 0, f"the Try-it is not valid bash: {parsed.stderr.strip()}"


def test_three_parts():
    """Part 0 (backprop by hand) opens the series, marked in its subjects; Part I follows
    the lecture, unmarked, and ends with the results; Part II closes the series, marked
    in every subject."""
    parts = parts_of([p.subject.split(": ", 1)[1] for p in PATCHES])
    first_1, first_2 = parts.index("Part I"), parts.index("Part II")
    assert 0 < first_1 < first_2 < N_STEPS, parts
    assert parts == ["Part 0"] * first_1 + ["Part I"] * (first_2 - first_1) + ["Part II"] * (
        N_STEPS - first_2
    )
    assert all("Part 0 · " in p.subject for p in PATCHES[:first_1]) and all(
        "Part II · " in p.subject for p in PATCHES[first_2:]
    )
    results_step = PATCHES[first_2 - 1]
    assert "tools/plot_log.py" in results_step.narration, (
        f"Part I must end with the results: {results_step.subject}"
    )


def test_checkout_every_step(series_history):
    try:
        for n in range(N_STEPS + 1):
            tag = f"step-{n:02d}"
            subprocess.run(["git", "checkout", "-q", tag], cwd=series_history, check=True)
            head = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=series_history, capture_output=True, text=True
            )
            tagged = subprocess.run(
                ["git", "rev-parse", f"{tag}^{{commit}}"],
                cwd=series_history,
                capture_output=True,
                text=True,
            )
            assert head.stdout == tagged.stdout
    finally:  # the history is the session's: the other tests find it on main
        subprocess.run(["git", "checkout", "-q", "main"], cwd=series_history, check=True)


# a Try-it a test, each in an xdist group of its own: with pytest-xdist they spread over its
# processes (conftest.py)
@pytest.mark.parametrize(
    "n",
    [
        pytest.param(n, marks=pytest.mark.xdist_group(f"try-it-{n:02d}"))
        for n in range(1, N_STEPS + 1)
    ],
    ids=lambda n: f"step-{n:02d}",
)
def test_step_keeps_its_promise(series_history, stand_ins, tmp_path, n):
    if ONLY and n not in ONLY:
        pytest.skip(f"not in CHECK_STEPS={os.environ['CHECK_STEPS']}")
    folder = checkout(series_history, n, tmp_path / f"step-{n:02d}")
    problem, output, _ = run(folder, PATCHES[n - 1].narration, stand_ins)
    assert problem is None, f"step {n:02d}: {problem}\n{output[-6000:]}"


def test_the_series_page_lists_every_step_in_its_part():
    """docs/series.md's step table: every subject, each under its part's heading."""
    page = (ROOT / "docs" / "series.md").read_text()
    table = page[page.index("## The steps") :]
    headings = {part: table.index(f"**{part}") for part in ("Part 0", "Part I", "Part II")}
    parts = parts_of([p.subject.split(": ", 1)[1] for p in PATCHES])
    for n, (patch, part) in enumerate(zip(PATCHES, parts), 1):
        title = PART.sub("", patch.subject.split(": ", 1)[1])
        row = f"| {n:02d} | {title} |"
        assert row in table, f"README lacks {row!r}"
        after = [p for p, at in headings.items() if at < table.index(row)]
        assert after and max(after, key=headings.get) == part, (
            f"{row!r} is not under {part}'s heading"
        )


def test_the_stand_ins_command_makes_every_stand_in_a_narration_names(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "input.txt").write_text((ROOT / "input.txt").read_text())
    assert walkthrough_main(["--project", str(tmp_path), "stand-ins"]) == 0
    folder = tmp_path / "stand-ins"
    assert capsys.readouterr().out == f"{folder}: tiny-gpt2/, hellaswag.jsonl\n"
    named = {
        m
        for p in PATCHES
        for _, swap in read(p.narration).swaps
        for m in re.findall(r"stand-ins/([\w.-]+)", swap)
    }
    assert named and all((folder / name).exists() for name in named), named
    examples = [json.loads(line) for line in (folder / "hellaswag.jsonl").read_text().splitlines()]
    assert len(examples) == 8 and all(
        len(e["endings"]) == 4 and e["label"] in range(4) for e in examples
    )
    assert (
        transformers.GPT2LMHeadModel.from_pretrained(folder / "tiny-gpt2").config.vocab_size
        == 50257
    )
    made = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    # again: what is there is kept
    assert walkthrough_main(["--project", str(tmp_path), "stand-ins"]) == 0
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == made
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "stand-ins").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "linked" / "input.txt").write_text("x")
    assert walkthrough_main(["--project", str(tmp_path / "linked"), "stand-ins"]) == 1
    assert "is in the way (a link or a file)" in capsys.readouterr().err
    assert list((tmp_path / "elsewhere").iterdir()) == []  # never written through the link


def test_the_stand_ins_command_writes_where_it_runs(tmp_path, monkeypatch, capsys):
    # a checkout of a step has no steps/: the stand-ins go there all the same, where its Try-it
    # looks for them
    pytest.importorskip("transformers")
    checkout = tmp_path / "step-49"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    assert walkthrough_main(["stand-ins"]) == 0
    assert capsys.readouterr().out == f"{checkout / 'stand-ins'}: tiny-gpt2/, hellaswag.jsonl\n"
    assert (checkout / "stand-ins" / "tiny-gpt2" / "config.json").is_file()
    assert not (ROOT / "stand-ins").is_symlink()


def test_a_stand_in_made_meanwhile_by_another_run_is_kept(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    import transformers

    folder = tmp_path / "stand-ins"
    save = transformers.GPT2LMHeadModel.save_pretrained

    def racing(model, path, *args, **kwargs):  # another run renames its copy into place first
        save(model, folder / "tiny-gpt2", *args, **kwargs)
        (folder / "tiny-gpt2" / "theirs").write_text("")
        save(model, path, *args, **kwargs)

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "save_pretrained", racing)
    make_stand_ins(folder, ROOT / "input.txt")
    # no copy left aside
    assert sorted(p.name for p in folder.iterdir()) == ["hellaswag.jsonl", "tiny-gpt2"]
    assert (folder / "tiny-gpt2" / "theirs").exists()
