"""Small git repositories the walkthrough tests read, made with a fixed identity and date."""

from pathlib import Path

from git import Git

from walkthrough.gitcmd import ISOLATED, run_git

# a fixed identity and date for the repositories the tests make, whatever the machine's
# git config says
ENV = {
    **ISOLATED,
    **{f"GIT_{who}_NAME": "Test" for who in ("AUTHOR", "COMMITTER")},
    **{f"GIT_{who}_EMAIL": "test@example.invalid" for who in ("AUTHOR", "COMMITTER")},
    **{f"GIT_{who}_DATE": "1700000000 +0000" for who in ("AUTHOR", "COMMITTER")},
}
BIG_LINES = 10_000


def git(path: Path, *args: str) -> str:
    return run_git(Git(str(path)), *args, env=ENV).decode()


def commit(path: Path, message: str, files: dict) -> None:
    """Write (or, for None, delete) files, then commit everything."""
    for name, content in files.items():
        target = path / name
        if content is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)


def make_odd_repo(path: Path) -> Path:
    """Seven first-parent steps: a root commit with a binary file, a rename, a deletion, non-UTF-8
    text, a change on main, a merge, and a 10,000-line file."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    commit(
        path,
        "Add files\n\nA script and a logo.",
        {"a.py": "print('hi')\nx = 1\n", "logo.bin": bytes(range(256))},
    )
    commit(path, "Rename the script", {"a.py": None, "b.py": "print('hi')\nx = 1\n"})
    commit(path, "Drop the logo", {"logo.bin": None})
    commit(path, "Latin-1 notes", {"notes.txt": b"caf\xe9 cr\xe8me\n"})
    git(path, "checkout", "-q", "-b", "side")
    commit(path, "Side work", {"side.txt": "from the side\n"})
    git(path, "checkout", "-q", "main")
    commit(path, "Main work", {"b.py": "print('hello')\nx = 1\n"})
    git(path, "merge", "-q", "--no-ff", "side", "-m", "Merge side")
    commit(path, "A big file", {"big.txt": "".join(f"line {n}\n" for n in range(BIG_LINES))})
    return path
