"""The walkthrough's model layer, on repositories made in temporary folders: git is the oracle."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from git import Git

from helpers import ROOT
from repos import BIG_LINES, commit, git
from walkthrough.bookmark import Bookmarks
from walkthrough.cli import SERIES_FILES, check_series, main
from walkthrough.diff import encode_path, parse_diff, side_by_side
from walkthrough.errors import WalkthroughError
from walkthrough.gitcmd import run_git
from walkthrough.history import load_series, parts_of
from walkthrough.patches import build, check, export
from walkthrough.rows import MAX_ROWS, columns, diff_layout, file_layout
from walkthrough_fixtures import DEMO_STEPS, INJECTED, LATIN1_NAME, make_hostile_repo, write_series

# ---- diffs


def test_parse_diff_quoted_paths_no_newline_and_short_hunk_headers():
    data = (
        b'diff --git "a/caf\\303\\251 x.txt" "b/caf\\303\\251 x.txt"\n'
        b"index 1..2 100644\n"
        b'--- "a/caf\\303\\251 x.txt"\n'
        b'+++ "b/caf\\303\\251 x.txt"\n'
        b"@@ -1 +1 @@\n"
        b"-old\n"
        b"\\ No newline at end of file\n"
        b"+new\n"
    )
    (file,) = parse_diff(data)
    assert file.path == "café x.txt" and file.status == "modified"
    assert [(line.kind, line.old, line.new, line.text) for line in file.hunks[0].lines] == [
        ("-", 1, None, "old"),
        ("\\", None, None, "No newline at end of file"),
        ("+", None, 1, "new"),
    ]


def test_side_by_side_pairs_removed_runs_with_added_runs():
    (file,) = parse_diff(
        b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,5 +1,3 @@\n keep\n-a\n-b\n+A\n same\n-gone\n"
    )
    rows = side_by_side(file.hunks[0])
    pairs = [(a and a.text, b and b.text) for a, b in rows]
    assert pairs == [("keep", "keep"), ("a", "A"), ("b", None), ("same", "same"), ("gone", None)]


# ---- reading any repository


def test_steps_of_a_repository_with_odd_commits(odd_repo):
    series = load_series(odd_repo)
    assert [s.title for s in series.steps] == [
        "Add files",
        "Rename the script",
        "Drop the logo",
        "Latin-1 notes",
        "Main work",
        "Merge side",
        "A big file",
    ]
    root, rename, delete, latin, _, merge, big = range(7)
    assert (
        series.steps[root].commit.parents == ()
        and series.steps[root].narration == "A script and a logo."
    )
    files = {f.path: f for f in series.files(root)}
    assert files["a.py"].status == "added" and files["a.py"].added == 2
    assert files["logo.bin"].binary and not files["logo.bin"].hunks
    (renamed,) = series.files(rename)
    assert (renamed.status, renamed.old_path, renamed.new_path) == ("renamed", "a.py", "b.py")
    (deleted,) = series.files(delete)
    assert (deleted.status, deleted.path, deleted.binary) == ("deleted", "logo.bin", True)
    (latin1,) = series.files(latin)
    assert latin1.hunks[0].lines[0].text == "caf\ufffd cr\ufffdme"  # bad bytes shown, not raised
    assert len(series.steps[merge].commit.parents) == 2
    assert [f.path for f in series.files(merge)] == ["side.txt"]  # against the first parent
    assert series.files(big)[0].added == BIG_LINES
    assert series.file_at(latin, "notes.txt") == b"caf\xe9 cr\xe8me\n"
    assert series.file_at(delete, "logo.bin") is None and series.file_at(root, "logo.bin") == bytes(
        range(256)
    )
    assert series.steps[root].ref == series.steps[root].commit.sha[:12]  # no tags: check out by id


def test_bare_repository_and_range(odd_repo, tmp_path):
    git(tmp_path, "clone", "-q", "--bare", str(odd_repo), "bare.git")
    bare = load_series(tmp_path / "bare.git")
    assert [s.commit.sha for s in bare.steps] == [s.commit.sha for s in load_series(odd_repo).steps]
    assert [f.path for f in bare.files(1)] == ["b.py"]
    assert [s.title for s in load_series(tmp_path / "bare.git", "HEAD~2..HEAD").steps] == [
        "Merge side",
        "A big file",
    ]


def test_a_bare_copy_without_a_config_file_is_read_as_itself(odd_repo, tmp_path):
    """gitpython takes a bare folder with no config for a work tree's .git; inside another
    repository, it would read that one instead."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q", "-b", "main")
    git(outer, "clone", "-q", "--bare", str(odd_repo), "bare.git")
    (outer / "bare.git" / "config").unlink()
    series = load_series(outer / "bare.git")
    assert [s.commit.sha for s in series.steps] == [
        s.commit.sha for s in load_series(odd_repo).steps
    ]
    assert [f.path for f in series.files(1)] == ["b.py"] and series.file_at(
        3, "notes.txt"
    ) == b"caf\xe9 cr\xe8me\n"


def test_try_it_lines_become_argument_lists_or_are_refused():
    from walkthrough.runner import argv_here, plan

    lines = "A=1 python x.py 'a b' && ls *\npython y.py | head\n# a comment\n"
    narration = f"**Try it**\n\n```bash\n{lines}```\n"
    first, second = plan(narration)
    assert [(c.argv, c.env) for c in first.commands] == [
        (["python", "x.py", "a b"], {"A": "1"}),
        (["ls", "*"], {}),
    ]
    assert (
        second.commands == ()
        and second.text == "python y.py | head"
        and "need a shell" in second.refused
    )
    assert argv_here(["python", "-c", "1"]) == [sys.executable, "-c", "1"] and argv_here(
        ["ls"]
    ) == ["ls"]
    assert plan("No Try-it here.") == []


def test_a_python_that_a_try_it_command_starts_is_the_readers_too(monkeypatch):
    # as under `torchrun --no-python python ...`: another program finds `python` on PATH, activated
    # venv or not
    from walkthrough.runner import env_here

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a venv not activated
    found = subprocess.run(
        ["sh", "-c", "python -c 'import sys; print(sys.prefix)'"],
        env=env_here({}),
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == sys.prefix, found


def test_search_finds_narration_and_diff_lines(odd_repo):
    series = load_series(odd_repo)
    matches = series.search("HELLO")
    assert [(m.step, m.file) for m in matches] == [(4, 0)]
    line = series.files(4)[0].hunks[matches[0].hunk].lines[matches[0].line]
    assert line.text == "print('hello')"
    assert [m.step for m in series.search("a logo") if m.file is None] == [0]


@pytest.mark.parametrize(
    "path, rev_range, message",
    [
        ("nowhere", "HEAD", "not a git repository"),
        (".", "no-such-ref", "bad range 'no-such-ref'"),
        (".", "HEAD..HEAD", "has no commits"),
        # git log would write that file
        (".", "--output=written-by-git", "a range does not start with '-'"),
        ("b.py", "HEAD", "not a git repository"),  # a file
    ],
)
def test_reading_errors_are_one_line(odd_repo, path, rev_range, message):
    with pytest.raises(WalkthroughError, match=message) as error:
        load_series(odd_repo / path if path != "." else odd_repo, rev_range)
    assert "\n" not in str(error.value) and not (odd_repo / "written-by-git").exists()


@pytest.fixture(scope="module")
def hostile_repo(tmp_path_factory) -> Path:
    return make_hostile_repo(tmp_path_factory.mktemp("hostile") / "repo")


def test_file_names_that_are_not_utf8_keep_their_bytes_and_their_status(hostile_repo):
    series = load_series(hostile_repo)
    files = {encode_path(file.path): file for file in series.files(0)}
    assert set(files) == {LATIN1_NAME, b'quote"\tand tab.txt'}
    latin = files[LATIN1_NAME]
    assert (latin.status, latin.label) == ("added", "caf\\xe9.txt")  # escaped for the screen
    assert series.file_at(0, latin.path) == b"latin name\n"
    assert series.file_at(0, files[b'quote"\tand tab.txt'].path) == b"odd name\n"


def test_checkout_commands_name_exactly_the_step_whatever_its_tag(hostile_repo):
    """Shell-quoted; never an option; --detach where a branch could win over the tag (the shell runs
    them in test_walkthrough_app's test of c)."""
    steps = load_series(hostile_repo).steps
    assert [step.ref for step in steps[:3]] == [INJECTED, "-b", "v1"]
    assert [step.checkout for step in steps] == [
        f"git checkout --detach 'refs/tags/{INJECTED}'",
        "git checkout --detach refs/tags/-b",
        "git checkout --detach refs/tags/v1",  # the branch v1 is another commit
        f"git checkout --detach {steps[3].commit.sha}",
    ]


# ---- the diff pane's rows


def test_rows_of_a_huge_diff_stop_at_the_cap_and_say_so(odd_repo):
    (big,) = load_series(odd_repo).files(6)
    layout = diff_layout([big], False, "step-07")
    assert len(layout.rows) == MAX_ROWS + 1 and layout.rows[0].text == "A big.txt   +10000 −0"
    assert layout.rows[-1].text == (
        f"… the diff is {BIG_LINES:,} lines; showing the first {MAX_ROWS - 2:,}. "
        "See it all: git show step-07"
    )
    lines = big.hunks[0].lines
    assert layout.line_rows[id(lines[0])] == 2 and id(lines[MAX_ROWS]) not in layout.line_rows
    assert layout.last_number == BIG_LINES and layout.file_rows == [0]


def test_every_cell_points_at_its_line_in_its_files_column(odd_repo):
    series = load_series(odd_repo)
    for index in range(len(series.steps)):
        files = series.files(index)
        texts = {id(file): columns(file) for file in files}
        for split in (False, True):
            layout = diff_layout(files, split, "ref")
            cells = [
                cell for row in layout.rows for cell in (row.left, row.right) if cell is not None
            ]
            assert all(
                texts[id(cell.file)][cell.side][cell.index] == cell.line.text for cell in cells
            )
            assert all(layout.rows[row].kind == "file" for row in layout.file_rows)


def test_side_by_side_rows_put_a_change_beside_what_it_replaces():
    (file,) = parse_diff(
        b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n"
    )
    layout = diff_layout([file], True, "ref")
    assert [row.kind for row in layout.rows] == ["file", "hunk", "code", "code"]
    keep, change = layout.rows[2:]
    assert keep.left.line is keep.right.line and (keep.left.side, keep.right.side) == ("old", "new")
    assert (change.left.line.text, change.right.line.text) == ("old", "new")
    assert layout.line_rows[id(change.left.line)] == layout.line_rows[id(change.right.line)] == 3


def test_whole_file_rows(tmp_path):
    layout = file_layout("a.py", b"x = 1\ny = 2\n", "step-02", "step-02")
    assert [row.text or row.left.line.text for row in layout.rows] == [
        "a.py at step-02",
        "x = 1",
        "y = 2",
    ]
    assert (
        layout.numbers == 1
        and layout.text == ["x = 1", "y = 2"]
        and layout.rows[2].left.line.new == 2
    )
    assert file_layout("a.py", None, "r", "r").rows[1].text == "not in the repository at this step"
    assert file_layout("a.bin", b"\0\1", "r", "r").rows[1].text == "binary file: 2 bytes"
    big = file_layout("big.txt", b"x\n" * (MAX_ROWS + 1), "r", "r")
    assert len(big.text) == MAX_ROWS and big.rows[-1].text.startswith(
        f"… {MAX_ROWS + 1:,} lines; showing the first"
    )


# ---- the series: build, export, check


def small_steps(n: int = 3) -> list:
    """n steps that grow one file, with a binary file along the way."""
    steps = [
        (
            f"Part {k}",
            f"Adds part {k}.\n\n## Try it\n\n    python run.py",
            {"run.py": "".join(f"print({i})\n" for i in range(k))},
        )
        for k in range(1, n + 1)
    ]
    steps[1][2]["icon.bin"] = bytes(range(256))
    return steps


@pytest.fixture
def steps_dir(tmp_path) -> Path:
    write_series(tmp_path / "steps", small_steps())
    return tmp_path / "steps"


def test_build_is_deterministic_tagged_and_skips_when_up_to_date(steps_dir, tmp_path):
    first = build(steps_dir, tmp_path / "one")
    assert [tag for tag, _ in first] == ["step-00", "step-01", "step-02", "step-03"]
    assert build(steps_dir, tmp_path / "two") == first  # same commit ids in another folder
    assert git(tmp_path / "one", "rev-parse", "HEAD").strip() == first[-1][1]
    # the work tree is checked out
    assert (tmp_path / "one" / "icon.bin").read_bytes() == bytes(range(256))
    marker = tmp_path / "one" / ".git" / "marker"
    marker.touch()
    assert build(steps_dir, tmp_path / "one") == first and marker.exists()  # nothing rebuilt
    write_series(steps_dir, small_steps(4))
    # steps/ changed: rebuilt
    assert len(build(steps_dir, tmp_path / "one")) == 5 and not marker.exists()


def test_build_ignores_the_machines_git_config_and_time_zone(steps_dir, tmp_path):
    """Another machine: a hostile global git config, another time zone and locale."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".gitconfig").write_text(
        "[user]\n\tname = Someone Else\n[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n"
        "[format]\n\tsignature = hello\n\tnumbered = true\n[core]\n\tabbrev = 20\n"
    )
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "TZ": "Asia/Kolkata",
        "LC_ALL": "C",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("GIT_CONFIG_GLOBAL", None)
    script = (
        "import sys, json; from walkthrough.patches import build; "
        "print(json.dumps(build(sys.argv[1], sys.argv[2])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, steps_dir, tmp_path / "there"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    assert [tuple(pair) for pair in json.loads(out.stdout)] == build(steps_dir, tmp_path / "here")


def test_build_refuses_to_overwrite_what_it_did_not_make(steps_dir, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(WalkthroughError, match="not made by walkthrough build"):
        build(steps_dir, tmp_path / "mine")
    history = tmp_path / "history"
    build(steps_dir, history)
    commit(history, "Step 04: Unexported", {"new.txt": "x\n"})
    write_series(steps_dir, small_steps(2))
    with pytest.raises(WalkthroughError, match="not exported"):
        build(steps_dir, history)


@pytest.mark.parametrize(
    "work, shows",
    [
        (["branch", "mine", "step-02"], "branch mine"),
        (["tag", "v1", "step-01"], "tag v1"),
        (["stash-an-edit"], "a stash"),
        (["edit"], "changed or new files"),
        (["new-file"], "changed or new files"),
    ],
)
def test_a_rebuild_never_destroys_the_learners_work_in_the_history(
    steps_dir, tmp_path, work, shows
):
    history = tmp_path / "history"
    build(steps_dir, history)
    if work[0] in ("stash-an-edit", "edit"):
        (history / "run.py").write_text("print('my edit')\n")
        if work[0] == "stash-an-edit":
            git(history, "stash", "-q")
    elif work[0] == "new-file":
        (history / "notes.txt").write_text("mine\n")
    else:
        git(history, *work)
    before = git(history, "for-each-ref")
    write_series(steps_dir, small_steps(2))  # steps/ changed: a build would rebuild
    with pytest.raises(WalkthroughError, match=f"would destroy your work there \\({shows}\\)"):
        build(steps_dir, history)
    assert git(history, "for-each-ref") == before  # nothing of it touched
    if work[0] == "new-file":
        assert (history / "notes.txt").read_text() == "mine\n"


def test_two_builds_at_once_both_succeed(steps_dir, tmp_path):
    """The second waits for the first (a lock on steps/), then finds the history up to date."""
    code = (
        "import sys; from pathlib import Path; from walkthrough.patches import build; "
        "build(*map(Path, sys.argv[1:]))"
    )
    argv = [sys.executable, "-c", code, str(steps_dir), str(tmp_path / "history")]
    runs = [
        subprocess.Popen(
            argv, cwd=Path(__file__).resolve().parents[1], stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    assert [(run.wait(timeout=120), run.stderr.read()) for run in runs] == [(0, ""), (0, "")]
    assert load_series(tmp_path / "history", "step-00..main").steps[-1].ref == "step-03"


def test_an_export_that_fails_half_way_leaves_the_old_patches_whole(
    steps_dir, tmp_path, monkeypatch
):
    """A full disk while the new patches are written: each old patch stays, byte for byte."""
    history = tmp_path / "history"
    build(steps_dir, history)
    commit(history, "Step 04: One more", {"more.txt": "x\n"})
    before = {p.name: p.read_bytes() for p in steps_dir.iterdir()}
    real = Path.replace

    def full_disk(self, target):
        raise OSError(28, "No space left on device")

    # the swap fails as a full disk would fail the writes before it
    monkeypatch.setattr(Path, "replace", full_disk)
    with pytest.raises(OSError):
        export(history, steps_dir)
    monkeypatch.setattr(Path, "replace", real)
    assert {p.name: p.read_bytes() for p in steps_dir.iterdir() if p.suffix == ".patch"} == before
    assert [p.name for p in steps_dir.iterdir() if p.name.startswith(".export-")] == []
    assert len(export(history, steps_dir)) == 4  # and the next export goes through


def test_build_then_export_is_a_byte_identical_round_trip(steps_dir, tmp_path):
    build(steps_dir, tmp_path / "history")
    written = export(tmp_path / "history", tmp_path / "again")
    assert [p.name for p in written] == sorted(p.name for p in steps_dir.iterdir())
    assert all(p.read_bytes() == (steps_dir / p.name).read_bytes() for p in written)


def test_export_after_editing_with_git(steps_dir, tmp_path):
    history = tmp_path / "history"
    build(steps_dir, history)
    # amend the last step's narration, add a step, as an author would (own identity, today's date)
    git(history, "commit", "-q", "--amend", "-m", "Step 03: Part 3\n\n# A heading\n\nBetter words.")
    commit(history, "Step 04: Part 4\n\nOne more.", {"more.txt": "more\n"})
    written = export(history, steps_dir)
    assert [p.name[:4] for p in written] == ["0001", "0002", "0003", "0004"]
    assert "# A heading\n\nBetter words." in (steps_dir / written[2].name).read_text()
    # export left history/ as a build of the new steps/: nothing to do
    tags = build(steps_dir, history)
    assert tags == build(steps_dir, tmp_path / "fresh")
    assert git(history, "rev-parse", "step-04").strip() == tags[-1][1]
    # drop the last step: its patch and its tag go
    git(history, "reset", "-q", "--hard", "step-03")
    assert len(export(history, steps_dir)) == 3 and not list(steps_dir.glob("0004-*"))
    assert "step-04" not in git(history, "tag")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda h: commit(h, "Step 05: Skips four", {"x.txt": "x\n"}),
            "should start with 'Step 04: '",
        ),
        (
            lambda h: git(h, "commit", "-q", "--allow-empty", "-m", "Step 04: Nothing"),
            "changes nothing",
        ),
        (
            lambda h: git(
                h,
                "merge",
                "-q",
                "--no-ff",
                "-m",
                "Step 04: Merge",
                git(h, "commit-tree", "step-01^{tree}", "-p", "step-01", "-m", "side").strip(),
            ),
            "is a merge",
        ),
    ],
)
def test_export_refuses_a_history_that_is_not_a_series(steps_dir, tmp_path, edit, message):
    history = tmp_path / "history"
    build(steps_dir, history)
    edit(history)
    with pytest.raises(WalkthroughError, match=message):
        export(history, steps_dir)


def project_with(tmp_path: Path, files: dict) -> Path:
    """A project folder whose files are `files` and whose steps/ builds exactly them."""
    project = tmp_path / "project"
    write_series(project / "steps", [("Everything", "All the files at once.", files)])
    for name, content in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(content)
    return project


FILES = {name: f"# {name}\n" for name in SERIES_FILES}


def test_check_passes_on_a_sound_series(tmp_path):
    project = project_with(tmp_path, FILES)
    assert check_series(project / "steps", project) == []
    assert main(["--project", str(project), "check"]) == 0


def test_check_catches_a_gap_a_missing_narration_and_a_different_final_tree(tmp_path, capsys):
    project = project_with(tmp_path, FILES)
    (project / "input.txt").write_text("changed\n")
    assert check_series(project / "steps", project) == [
        "input.txt: the final step's copy differs from the project's"
    ]
    write_series(project / "steps", [("One", "Words.", FILES), ("Two", "", {"extra.txt": "x\n"})])
    assert check_series(project / "steps", project) == [
        "0002-Step-02-Two.patch: no narration (the message body is empty)",
        f"extra.txt: in the final step but not in the project ({project})",
        "input.txt: the final step's copy differs from the project's",
    ]
    patch = project / "steps" / "0002-Step-02-Two.patch"
    patch.write_text(patch.read_text().replace("Subject: Step 02:", "Subject: Step 03:"))
    problems = check_series(project / "steps", project)
    assert problems[0].startswith(
        "0002-Step-02-Two.patch: subject 'Step 03: Two' should start with 'Step 02: '"
    )
    assert main(["--project", str(project), "check"]) == 1
    assert len(capsys.readouterr().err.splitlines()) == len(problems)


def test_check_catches_a_patch_that_does_not_apply_and_a_non_canonical_file(tmp_path):
    project = project_with(tmp_path, FILES)
    write_series(
        project / "steps",
        [("One", "Words.", FILES), ("Two", "More.", {"fineweb.py": "# changed\n"})],
    )
    patch = project / "steps" / "0002-Step-02-Two.patch"
    text = patch.read_text()
    patch.write_text(text.replace("-# fineweb.py", "-# not what is there"))
    assert check_series(project / "steps", project) == [
        "0002-Step-02-Two.patch does not apply: error: patch failed: fineweb.py:1"
    ]
    patch.write_text(
        text.replace("More.", "More.\n\n---\n\nA rule: git am takes it for the end of the message.")
    )
    (project / "fineweb.py").write_text("# changed\n")
    (problem,) = check_series(project / "steps", project)
    assert problem.startswith(
        "0002-Step-02-Two.patch: line 8 (narration line 3) is not kept as written"
    )


@pytest.mark.parametrize(
    "old, new, kept",
    [
        # a letter: the step says something else now, byte for byte
        (b"Adds part 2.", b"Adda part 2.", True),
        (b"Adds part 2.", b"Adds part 2!", True),
        (b"part 2.\n", b"part 2. \n", False),  # trailing space: a build drops it
        (b"part 2.\n", b"part 2.\r\n", False),
        (b"part 2.", b"part 2\xff", False),  # not UTF-8
        (b"\n\n## Try", b"\n\n\n## Try", False),  # a run of blank lines
        (b"Adds part 2.", b"Adds part 2.\n---", False),  # git am ends the message there
    ],
)
def test_check_holds_every_byte_of_a_narration_to_its_patch(steps_dir, tmp_path, old, new, kept):
    """One byte of a narration changed: check names the patch, or a build carries the change exactly
    as written."""
    project = tmp_path / "project"
    build(steps_dir, project)  # a work tree with the files the series ends at
    (patch,) = steps_dir.glob("0002-*.patch")
    text = patch.read_bytes()
    assert text.count(old) == 1
    patch.write_bytes(text.replace(old, new))
    problems = check(steps_dir, project, [])
    if kept:
        assert problems == []
        build(steps_dir, tmp_path / "again")
        message = run_git(Git(str(tmp_path / "again")), "cat-file", "commit", "step-02")
        assert new in message
    else:
        assert len(problems) == 1 and problems[0].startswith(f"{patch.name}: line ")
        assert "(narration line " in problems[0] and "is not kept as written" in problems[0]


def test_check_compares_every_file_of_the_last_step_and_asks_for_the_listed_ones(tmp_path):
    project = project_with(tmp_path, {"a.py": "# a\n", "data/b.txt": "b\n"})
    # in the project, not in the series: only the list makes it a problem
    (project / "c.py").write_text("# c\n")
    assert check(project / "steps", project, ["a.py"]) == []
    assert check(project / "steps", project, ["a.py", "c.py", "not-anywhere.py"]) == [
        "c.py: in the project but missing from the final step"
    ]
    # not listed, but in the last step: compared all the same
    (project / "data" / "b.txt").write_text("B\n")
    assert check(project / "steps", project, []) == [
        "data/b.txt: the final step's copy differs from the project's"
    ]


@pytest.mark.parametrize("command", ["check", "build", ""])
def test_a_missing_steps_folder_is_one_clear_line(tmp_path, capsys, command):
    assert main(["--project", str(tmp_path), *([command] if command else [])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no step patches" in err and "Traceback" not in err


def test_build_into_a_file_or_over_a_broken_stamp_is_one_line_and_loses_nothing(
    steps_dir, tmp_path, capsys
):
    notes = tmp_path / "notes.txt"
    notes.write_text("precious")
    assert main(["--project", str(tmp_path), "build", "--into", str(notes)]) == 1
    assert capsys.readouterr().err == (
        f"walkthrough: error: {notes} is a file, not a folder: build somewhere else\n"
    )
    assert notes.read_text() == "precious"
    history = tmp_path / "history"
    tip = build(steps_dir, history)[-1][1]
    stamp = history / ".git" / "walkthrough-build.json"
    for garbage in (b"{not json", b"", b"\xff", b"[]", b'{"format": 1}', b'{"steps": 1, "tip": 2}'):
        stamp.write_bytes(garbage)
        assert main(["--project", str(tmp_path), "build"]) == 1
        err = capsys.readouterr().err
        assert (
            err.startswith(f"walkthrough: error: {stamp} is not a build stamp we can read")
            and err.count("\n") == 1
        )
        assert git(history, "rev-parse", "main").strip() == tip and stamp.read_bytes() == garbage


def careless(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """Mistakes a careless user can make, set up in `tmp`: name -> (arguments, what the one-line
    error says)."""
    (tmp / "a-file").write_text("mine\n")
    (tmp / "steps-is-a-file").mkdir()
    (tmp / "steps-is-a-file" / "steps").write_text("mine\n")
    (tmp / "patch-is-a-folder" / "steps" / "0001-Step-01-X.patch").mkdir(parents=True)
    (tmp / "history-is-a-file").mkdir()
    (tmp / "history-is-a-file" / "history").write_text("mine\n")
    return {
        "--repo a file": (
            ["--repo", str(tmp / "a-file")],
            f"not a git repository: {tmp / 'a-file'}",
        ),
        "--project a file": (
            ["--project", str(tmp / "a-file"), "check"],
            f"{tmp / 'a-file' / 'steps'}: Not a directory",
        ),
        "steps/ a file": (
            ["--project", str(tmp / "steps-is-a-file"), "build"],
            "steps: Not a directory",
        ),
        "a patch that is a folder": (
            ["--project", str(tmp / "patch-is-a-folder"), "check"],
            ".patch: Is a directory",
        ),
        "--into inside a file": (
            ["--project", str(tmp), "build", "--into", str(tmp / "a-file" / "h")],
            f"{tmp / 'a-file'} is a file, not a folder",
        ),
        "export --from a file": (
            ["--project", str(tmp), "export", "--from", str(tmp / "a-file")],
            "not a git repository",
        ),
        "history/ a file": (
            ["--project", str(tmp / "history-is-a-file"), "export"],
            "not a git repository",
        ),
    }


CARELESS = [
    "--repo a file",
    "--project a file",
    "steps/ a file",
    "a patch that is a folder",
    "--into inside a file",
    "export --from a file",
    "history/ a file",
]


@pytest.mark.parametrize("case", CARELESS)
def test_careless_paths_are_one_line_and_exit_1(tmp_path, capsys, case):
    write_series(tmp_path / "steps", DEMO_STEPS[:1])
    argv, message = careless(tmp_path)[case]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("walkthrough: error: ") and message in err and err.count("\n") == 1, err
    assert (tmp_path / "a-file").read_text() == "mine\n"


def test_a_relative_project_path_builds_and_checks(tmp_path, monkeypatch):
    """git applies the patches from inside the new repository: a relative steps/ path must still
    find them."""
    project_with(tmp_path, {"run.py": "print(1)\n"})
    monkeypatch.chdir(tmp_path)
    assert main(["--project", "project", "build"]) == 0
    assert check(Path("project/steps"), Path("project"), ["run.py"]) == []


def test_cli_build_export_and_reader_errors(tmp_path, capsys):
    write_series(tmp_path / "steps", DEMO_STEPS)
    assert main(["--project", str(tmp_path), "build"]) == 0
    assert "step-00 .. step-05" in capsys.readouterr().out
    assert main(["--project", str(tmp_path), "export"]) == 0
    assert main(["--repo", str(tmp_path / "nowhere")]) == 1
    assert main(["--repo", str(tmp_path / "history"), "step-99..main"]) == 1
    first, second = capsys.readouterr().err.splitlines()
    assert first == f"walkthrough: error: not a git repository: {tmp_path / 'nowhere'}"
    assert second.startswith("walkthrough: error: bad range 'step-99..main': fatal: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--repo", "a", "b", "c"],
            "--repo takes a PATH and at most one RANGE (see walkthrough --help)",
        ),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag (see walkthrough --help)"),
        (
            ["build", "--into"],
            "argument --into: expected one argument (see walkthrough build --help)",
        ),
        (["frobnicate"], "argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_1(capsys, argv, message):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"walkthrough: error: {message}") and err.count("\n") == 1


def test_python_dash_m_and_the_model_layer_never_imports_textual(tmp_path):
    code = (
        "import sys, walkthrough.cli, walkthrough.patches, walkthrough.rows,"
        " walkthrough.bookmark, walkthrough.run_control, walkthrough.step_files,"
        " walkthrough.clipboard, walkthrough.editor, walkthrough.navigation, walkthrough.keys;"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'textual'], 'textual imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    out = subprocess.run(
        [sys.executable, "-m", "walkthrough", "--project", str(tmp_path), "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert (
        out.returncode == 1
        and out.stderr.startswith("walkthrough: error: ")
        and out.stderr.count("\n") == 1
    )


# ---- where you left off


def test_bookmarks_recall_by_commit_then_by_number(odd_repo, tmp_path):
    series = load_series(odd_repo)
    marks = Bookmarks(tmp_path / "state" / "walkthrough.json")
    assert marks.recall(series) == 0
    marks.remember(series, 4)
    assert Bookmarks(marks.path).recall(series) == 4
    data = json.loads(marks.path.read_text())
    data[series.key]["sha"] = "0" * 40  # the series was rebuilt: the number still finds the place
    marks.path.write_text(json.dumps(data))
    assert marks.recall(series) == 4
    # another range, another bookmark
    assert marks.recall(load_series(odd_repo, "HEAD~2..HEAD")) == 0
    marks.path.write_text("{not json")
    assert marks.recall(series) == 0


def test_a_submodule_is_not_a_file_to_open(tmp_path):
    repo = tmp_path / "with-submodule"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "Step 01: A file", {"a.txt": "a\n"})
    sha = git(repo, "rev-parse", "HEAD").strip()
    # a gitlink, as a submodule leaves
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{sha},vendor")
    git(repo, "commit", "-q", "-m", "Step 02: A submodule")
    series = load_series(repo)
    with pytest.raises(WalkthroughError, match="vendor is a submodule at this step, not a file"):
        series.file_at(1, "vendor")
    assert series.file_at(1, "a.txt") == b"a\n" and series.file_at(1, "nothing.txt") is None


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr("walkthrough.cli._run", interrupted)
    assert main(["check"]) == 130
    assert capsys.readouterr().err == "walkthrough: interrupted\n"


@pytest.mark.parametrize(
    "titles, parts",
    [
        # the lecture's steps unmarked, then Part II
        (["A", "Part II · B", "C"], ["Part I", "Part II", None]),
        (
            ["Part 0 · A", "Part 0 · B", "C", "D", "Part II · E"],
            ["Part 0", "Part 0", "Part I", "Part I", "Part II"],
        ),
        (["A", "B"], [None, None]),  # another repository's history: no parts at all
    ],
)
def test_parts_of_a_series_titles(titles, parts):
    assert parts_of(titles) == parts


@pytest.mark.parametrize(
    "argv, words",
    [
        (["python", "-c", "print('micrograd', 1)"], "python -c \"print('micrograd', 1)\""),
        (
            ["torchrun", "--nproc_per_node=2", "train_gpt2.py"],
            "torchrun --nproc_per_node=2 train_gpt2.py",
        ),
        (["ls", "two words", "*", "a$b"], "ls 'two words' '*' 'a$b'"),
        # a quote and a $: only shlex's way keeps both
        (["echo", "it's $HOME"], "echo 'it'\"'\"'s $HOME'"),
    ],
)
def test_the_run_pane_shows_a_command_as_typed_and_as_a_shell_reads_it(argv, words):
    """As the Try-it has it: `python`, not the path of the reader's interpreter that runs it."""
    from walkthrough.narration import Command
    from walkthrough.runner import shown_command

    shown = shown_command(Command(argv, {"GREETING": "hi there"}))
    assert shown == f"GREETING='hi there' {words}"
    assert shlex.split(shown) == ["GREETING=hi there", *argv]  # bash reads back the same words
