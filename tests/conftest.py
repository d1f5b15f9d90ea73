import os
import signal
import sys
from pathlib import Path

import pytest

from helpers import ROOT

sys.path.insert(0, str(ROOT))

# The GPT-2 tokenizer offline: tiktoken reads its BPE files from this cache (see
# ../shared/README.md).
_shared_tiktoken = ROOT.parent / "shared" / "tiktoken"
if "TIKTOKEN_CACHE_DIR" not in os.environ and _shared_tiktoken.is_dir():
    os.environ["TIKTOKEN_CACHE_DIR"] = str(_shared_tiktoken)
# no test may touch the network: make HF libraries fail fast instead of hanging
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# torch's OpenMP threads wait for work asleep, not spinning: the suite runs a process a core, and
# beside it a spinning thread burns a core that another process needs (a tiny run took twice the CPU
# time). The thread counts, and so the order of every float sum, stay as they are. Set before
# anything loads torch, here and in every process started.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from repos import make_odd_repo  # noqa: E402  (it imports walkthrough, from ROOT)

# pyproject.toml's addopts hold pytest-xdist's options: its processes, its groups, their order. With
# pytest-xdist off (`python -m pytest -p no:xdist`, or PYTEST_DISABLE_PLUGIN_AUTOLOAD=1) no plugin
# knows them and pytest would stop at "unrecognized arguments": then they are known here, and mean
# nothing, as the xdist_group mark the tests are grouped by. With pytest-xdist on, nothing here.
XDIST_OPTIONS = {
    "--numprocesses": "store",
    "--maxprocesses": "store",
    "--dist": "store",
    "--no-loadscope-reorder": "store_true",
}


def pytest_addoption(parser, pluginmanager) -> None:
    if not pluginmanager.has_plugin("xdist"):
        group = parser.getgroup("xdist", "pytest-xdist (off: its options in addopts are ignored)")
        for option, action in XDIST_OPTIONS.items():
            group.addoption(option, action=action, help="ignored: pytest-xdist is off")


def pytest_configure(config) -> None:
    if not config.pluginmanager.has_plugin("xdist"):
        config.addinivalue_line("markers", "xdist_group(name): ignored: pytest-xdist is off")


def default_signals_for_children() -> None:
    """A shell starts a background job (`pytest &`) with SIGINT ignored, and `nohup` ignores SIGHUP;
    every process the suite starts would inherit that, and the tests that send those signals need
    them acted on. A handler, unlike an ignored signal, is reset to the default at exec: the suite
    goes on ignoring them, its children do not."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, lambda signum, frame: None)


default_signals_for_children()


def pytest_sessionstart(session) -> None:
    """Every temporary file of the session in pytest's own base folder, not the system's: a failed
    exercise check keeps its check-* folder for the command its message quotes, torchrun leaves
    torchelastic_*, and a suite run left hundreds in /tmp. Here they go beside tmp_path's folders,
    which pytest removes three runs later. TMPDIR is set for every process the suite starts
    (os.environ, before the test files copy it into their ENVs at import: a fixture would come too
    late), tempfile.tempdir for this one, which may have read TMPDIR already. pytest-xdist's
    workers, started after this, have each their own base folder, and their own TMPDIR in it."""
    import getpass
    import tempfile

    # torch.compile's cache stays where it was: meant to outlive a run, it would be rebuilt every
    # run
    cache = Path(tempfile.gettempdir(), "torchinductor_" + getpass.getuser())  # torch's default
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache))
    # the tmp_path_factory fixture's, made already
    scratch = session.config._tmp_path_factory.mktemp("tmp")
    os.environ["TMPDIR"] = tempfile.tempdir = str(scratch)


@pytest.fixture(scope="module")
def odd_repo(tmp_path_factory) -> Path:
    """Seven odd first-parent steps (see repos.make_odd_repo), for the walkthrough's model and app
    tests."""
    return make_odd_repo(tmp_path_factory.mktemp("odd") / "repo")


@pytest.fixture(scope="session")
def series_history(tmp_path_factory) -> Path:
    """steps/ built once into a history with step-NN tags (a project folder's history/, inside a
    scratch folder)."""
    from walkthrough.patches import build

    into = tmp_path_factory.mktemp("series") / "history"
    build(ROOT / "steps", into)
    return into


# The files that take longest, started first (as measured, longest first; pyproject.toml's
# --no-loadscope-reorder keeps this order): with pytest-xdist, a long file started last would leave
# one process working alone at the end while the others wait. The steps' Try-its (short, each a
# test) come last, filling the gaps: the later steps' first, as they run longer (whole training
# runs, torchrun), the short ones of Part 0 at the very end.
LONGEST_FIRST = [
    "test_reproduce.py",
    "test_train.py",
    "test_errors.py",
    "test_hellaswag.py",
    "test_fineweb.py",
    "test_walkthrough_app.py",
    "test_exercises.py",
    "test_sample_export.py",
    "test_gpu_acceptance.py",
]


# before pytest-xdist's own, which reads the groups into the tests' ids
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """pytest-xdist's --dist loadgroup gives a group of tests to one process: a test file's tests
    form a group (they share the file's fixtures) unless a test names its own (each step's Try-it
    does, test_steps.py)."""
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.path.name))

    def order(item):
        if item.path.name in LONGEST_FIRST:
            return (LONGEST_FIRST.index(item.path.name), 0)
        group = item.get_closest_marker("xdist_group").args[0]
        if not group.startswith("try-it-"):
            return (len(LONGEST_FIRST), 0)
        # Part II's long runs first, Part 0's last
        return (len(LONGEST_FIRST) + 1, -int(group.removeprefix("try-it-")))

    items.sort(key=order)
