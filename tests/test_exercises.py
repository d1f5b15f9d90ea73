"""Rebuild it yourself: every Part I step's check passes at its own tag and fails at the one before
(so it is not vacuous), and `walkthrough exercise N` works as a learner uses it: make the tree,
check, compare, reset, remove."""

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest

from check_tags import verify
from helpers import ROOT
from walkthrough import checks
from walkthrough.bookmark import Bookmarks
from walkthrough.cli import main
from walkthrough.exercise import Exercise
from walkthrough.history import load_series
from walkthrough.patches import HISTORY_RANGE, build, open_history


@pytest.fixture(scope="module")
def verdicts(series_history, tmp_path_factory):
    """Every check at its tag and at the tag before, two processes at a time; the timings
    are printed (-s)."""
    started = time.time()
    found = verify(series_history, list(checks.CHECKS), tmp_path_factory.mktemp("tags"))
    each = ", ".join(f"{slug} {at.seconds:.1f}s" for slug, (at, _) in found.items())
    print(
        f"\n{len(found)} checks at their tags and the tags before: "
        f"{time.time() - started:.0f}s ({each})"
    )
    return found


def part_one(history: Path) -> list:
    return [
        step for step in load_series(history, HISTORY_RANGE).steps if "Part II" not in step.title
    ]


def test_every_step_has_its_own_step_id(series_history):
    slugs = [step.slug for step in load_series(series_history, HISTORY_RANGE).steps]
    assert None not in slugs, "a step whose message does not end with a Step-Id: line"
    assert len(set(slugs)) == len(slugs), "two steps with one Step-Id"


def test_every_part_one_step_has_a_check(series_history):
    slugs = [step.slug for step in part_one(series_history)]
    assert [s for s in slugs if s not in checks.CHECKS] == []
    assert set(checks.CHECKS) <= set(slugs), "a check for a step that is not in Part I"


@pytest.mark.parametrize("slug", list(checks.CHECKS))
def test_check_passes_at_its_tag_and_fails_before(verdicts, slug):
    at, before = verdicts[slug]
    assert at.ok, f"{slug} fails at its own tag: {at.message}"
    assert not before.ok, f"{slug} passes at the tag before its step: it proves nothing"
    assert "\n" not in before.message and before.message, "a failure is one readable line"


@pytest.mark.parametrize("slug", list(checks.CHECKS))
def test_check_says_what_it_proves(slug):
    check = checks.CHECKS[slug]
    assert len(check.proves.split()) >= 10, "a docstring saying what the check proves"
    assert check.calls, "the names the learner must build"


def test_the_checks_import_nothing_heavy():
    """The reader and the CLI import the registry: torch is imported by the checks' process only."""
    code = "import sys, walkthrough.checks, walkthrough.exercise; print('torch' in sys.modules)"
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---- walkthrough exercise N, as a learner types it


@pytest.fixture
def project(series_history, tmp_path) -> Path:
    """A project folder with the real steps/ and an already built history/ (the CLI would
    build the same)."""
    (tmp_path / "steps").symlink_to(ROOT / "steps")
    shutil.copytree(series_history, tmp_path / "history", symlinks=True)
    return tmp_path


def cli(capsys, project: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--project", str(project), "exercise", *args])
    out, err = capsys.readouterr()
    return code, out, err


def tying_step(project: Path) -> int:
    return next(step.number for step in open_history(project).steps if step.slug == "tying")


def test_an_exercise_from_start_to_pass(project, capsys):
    n = tying_step(project)
    code, out, _ = cli(capsys, project, str(n))
    folder = project / f"exercise-{n:02d}-tying"
    assert code == 0 and folder.is_dir()
    assert out.startswith(f"Exercise: step {n}, Weight tying\nYour tree: {folder}")
    assert "  - train_gpt2.GPT\n" in out and f"walkthrough exercise {n} --check" in out
    assert "+        self.transformer.wte.weight" not in out, "the narration, not the diff"

    # the tree starts at the step before: the check fails, as one line
    code, out, _ = cli(capsys, project, str(n), "--check")
    assert code == 1
    assert out == (
        f"step {n} (Weight tying): fail: GPT.transformer.wte.weight and GPT.lm_head.weight: "
        "expected the same tensor, found two tensors\n"
    )

    # the learner ties the weights the other way round: one tensor, but the embedding's N(0, 1) one
    script = folder / "train_gpt2.py"
    text = script.read_text()
    head = "        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)\n"
    assert head in text
    script.write_text(
        text.replace(head, head + "        self.lm_head.weight = self.transformer.wte.weight\n")
    )
    code, out, _ = cli(capsys, project, str(n), "--check")
    assert (
        code == 1
        and out.startswith(f"step {n} (Weight tying): fail: a new tied model's loss")
        and "N(0, 1)" in out
    )

    # and then the lecture's way round, in a line of their own
    script.write_text(
        text.replace(
            head, head + "        self.transformer.wte.weight = self.lm_head.weight  # tied\n"
        )
    )
    code, out, _ = cli(capsys, project, str(n), "--check")
    assert (code, out) == (0, f"step {n} (Weight tying): pass\n")

    # running it again keeps the work
    code, out, _ = cli(capsys, project, str(n))
    assert code == 0 and "exists already: your work in it is kept" in out
    assert "self.transformer.wte.weight = self.lm_head.weight  # tied" in script.read_text()

    # starting over sets the tree aside, whole, and says where: nothing of the learner's is deleted
    code, out, _ = cli(capsys, project, str(n), "--reset")
    (kept,) = project.glob(f"exercise-{n:02d}-tying.kept-*")
    assert (
        code == 0 and "# tied" not in script.read_text() and f"your tree as it was is {kept}" in out
    )
    assert "# tied" in (kept / "train_gpt2.py").read_text()
    code, out, _ = cli(capsys, project, str(n), "--remove")
    assert (
        code == 0
        and not folder.exists()
        and len(list(project.glob(f"exercise-{n:02d}-tying.kept-*"))) == 2
    )
    assert out.startswith(f"{folder} set aside as ") and "rename it back to go on" in out
    code, _, err = cli(capsys, project, str(n), "--check")
    assert code == 1 and err == (
        f"walkthrough: error: no exercise tree for step {n} ({folder} does not exist): "
        f"run walkthrough exercise {n} first\n"
    )


def test_exercise_works_where_the_learner_stands_never_in_the_installed_project(
    project, capsys, monkeypatch, tmp_path
):
    n = tying_step(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # no steps/ here: no tree is made, here or in the installed project
    monkeypatch.chdir(elsewhere)
    assert main(["exercise", str(n)]) == 1
    err = capsys.readouterr().err
    assert (
        "holds no steps/: run walkthrough exercise in the project's folder, or pass --project DIR"
        in err
    )
    assert list(elsewhere.iterdir()) == [] and not (ROOT / f"exercise-{n:02d}-tying").exists()
    monkeypatch.chdir(project)  # in a project's folder: that project, without --project
    assert main(["exercise", str(n)]) == 0 and (project / f"exercise-{n:02d}-tying").is_dir()


def test_a_step_without_a_check_says_so(project, capsys):
    last = open_history(project).steps[-1]
    code, out, err = cli(capsys, project, str(last.number))
    assert code == 1 and out == ""
    assert err.startswith(
        f"walkthrough: error: step {last.number} ({last.title}) has no exercise check"
    )
    assert not list(project.glob("exercise-*"))
    code, _, err = cli(capsys, project, "999")
    assert code == 1 and err.startswith("walkthrough: error: no step 999: the series has steps 1-")


def test_exercise_survives_a_rebuilt_history(project, capsys):
    """steps/ changed and history/ was built again: the learner's files still check,
    reset and remove."""
    n = tying_step(project)
    cli(capsys, project, str(n))
    folder = project / f"exercise-{n:02d}-tying"
    shutil.rmtree(project / "history")
    build(project / "steps", project / "history")
    code, out, _ = cli(capsys, project, str(n), "--check")
    assert code == 1 and "expected the same tensor" in out
    code, _, _ = cli(capsys, project, str(n), "--reset")
    assert code == 0 and (folder / ".git").is_file()
    code, _, _ = cli(capsys, project, str(n), "--remove")
    assert (
        code == 0
        and not folder.exists()
        and len(list(project.glob(f"exercise-{n:02d}-tying.kept-*"))) == 2
    )


def test_compare_shows_the_learners_change_beside_the_step(project):
    from walkthrough.app import WalkthroughApp

    series = open_history(project)
    exercise = Exercise.of(series, tying_step(project))
    exercise.create()
    script = exercise.folder / "train_gpt2.py"
    script.write_text(script.read_text() + "# my tying goes here\n")
    (exercise.folder / "log").mkdir()
    # a run's output is not the answer
    (exercise.folder / "log" / "log.txt").write_text("0 train 10.9\n")

    compared = exercise.compare()
    ours, yours, difference = compared.steps
    assert (
        ours.commit.sha == exercise.step.commit.sha and yours.commit.parents == ours.commit.parents
    )
    files = compared.files(1)
    assert [f.path for f in files] == ["train_gpt2.py"]
    added = [line.text for hunk in files[0].hunks for line in hunk.lines if line.kind == "+"]
    assert added == ["# my tying goes here"]
    # the learner's tree against the series' step: their line, and the series' tie they have
    # not written yet
    assert (
        difference.commit.parents == (ours.commit.sha,)
        and difference.commit.tree == yours.commit.tree
    )
    lines = [
        (line.kind, line.text) for f in compared.files(2) for hunk in f.hunks for line in hunk.lines
    ]
    assert ("+", "# my tying goes here") in lines and any(
        kind == "-" and "self.transformer.wte.weight = self.lm_head.weight" in text
        for kind, text in lines
    )
    # history/ itself is untouched
    assert "my tying" not in (series.repo.git.status("--porcelain") or "")

    app = WalkthroughApp(compared, Bookmarks(project / "bookmarks.json"))

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("n")
            return str(app.query_one("#title").render())

    title = asyncio.run(run())
    # one step's versions: no "/3"
    assert title.startswith(f"Step {exercise.step.number} · Your step")


def test_a_failure_that_quotes_a_command_says_where_it_runs(project, capsys, monkeypatch):
    """A check's message quotes the command its figure came from; that command runs in
    the learner's tree."""
    from walkthrough import checks, exercise

    n = tying_step(project)
    cli(capsys, project, str(n))
    quoted = checks.Result(
        "tying", False, "`python train_gpt2.py --max-steps 2`: expected 1.0, found 2.0", 1.0
    )
    monkeypatch.setattr(exercise.Exercise, "run_check", lambda self: quoted)
    code, out, _ = cli(capsys, project, str(n), "--check")
    folder = project / f"exercise-{n:02d}-tying"
    assert (
        code == 1
        and out.splitlines()[1] == f"(the commands quoted run in {folder}: cd there to paste one)"
    )


def test_the_docs_worked_example_is_what_the_check_prints(project, capsys):
    """docs/exercises.md's worked example: its mistake, added to the learner's tree, prints
    exactly its message."""
    page = (ROOT / "docs" / "exercises.md").read_text()
    blocks = [
        line.strip() for line in page.splitlines() if line.startswith("    ") and line.strip()
    ]
    mistake = next(
        line for line in blocks if "lm_head.weight" in line and "walkthrough" not in line
    )
    message = next(line for line in blocks if ": fail: " in line)
    n = tying_step(project)
    cli(capsys, project, str(n))
    script = project / f"exercise-{n:02d}-tying" / "train_gpt2.py"
    head = "        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)\n"
    script.write_text(script.read_text().replace(head, head + "        " + mistake + "\n"))
    code, out, _ = cli(capsys, project, str(n), "--check")
    assert (code, out) == (1, message + "\n")


def test_an_exercise_folder_in_the_way_is_refused_and_kept(project, capsys):
    n = tying_step(project)
    in_the_way = project / f"exercise-{n:02d}-tying"
    in_the_way.write_text("my notes\n")  # a file where the tree would go
    code, out, err = cli(capsys, project, str(n))
    assert code == 1 and "is in the way and is not an exercise tree" in err and "kept" not in out
    assert in_the_way.read_text() == "my notes\n"
