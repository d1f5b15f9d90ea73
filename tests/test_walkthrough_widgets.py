"""The reader's widgets one at a time, each in an app of its own: what the screen hands them, what
they show, and which messages they keep to themselves."""

import ast
import asyncio
import functools
import importlib
import inspect
import textwrap
from pathlib import Path

import textual
from textual.app import App
from textual.widgets import Input, OptionList, RichLog, Static

import walkthrough
from walkthrough.app import WalkthroughApp
from walkthrough.change_pane import ChangePane
from walkthrough.diff import Line, parse_diff
from walkthrough.diff_view import DiffView
from walkthrough.file_list import FileList
from walkthrough.history import load_series
from walkthrough.keys import KEYS
from walkthrough.narration_view import Narration
from walkthrough.prompt import Prompt
from walkthrough.reader_screen import ReaderScreen
from walkthrough.rows import diff_layout
from walkthrough.run_panel import RunPanel
from walkthrough.step_list import StepList
from walkthrough.title_bar import TitleBar


def added(path: str, lines: int) -> bytes:
    """A diff that adds `path`, `lines` lines long."""
    body = "".join(f"+line {n}\n" for n in range(1, lines + 1))
    head = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
    return (head + f"@@ -0,0 +1,{lines} @@\n" + body).encode()


# longer than the pane, both: the second file's header is a row the pane can scroll to the top
TWO_FILES = added("a.py", 60) + added("b.txt", 40)


class Alone(App[None]):
    """One widget (and a DiffView to take focus from it), and the messages that reach the app. The
    reader's stylesheet: a pane's size comes from it."""

    CSS_PATH = Path(walkthrough.__file__).parent / WalkthroughApp.CSS_PATH

    def __init__(self, widget):
        super().__init__()
        self.widget, self.heard = widget, []

    def compose(self):
        yield self.widget
        yield DiffView(id="elsewhere")

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.heard.append(event)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.heard.append(event.value)


def drive(widget, steps, size=(80, 24)) -> Alone:
    app = Alone(widget)

    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await steps(pilot)

    asyncio.run(run())
    return app


def test_the_change_pane_swaps_diff_and_run_and_the_keys_follow_what_is_shown():
    files = parse_diff(TWO_FILES)
    layout = diff_layout(files, False, "abc")
    change = ChangePane(id="change")  # as the screen makes it: the stylesheet sizes its parts

    async def steps(pilot):
        diff, run = change.query_one(DiffView), change.query_one(RunPanel)
        file_list = change.query_one(FileList)
        change.list_files(files, 1)
        change.show_diff(layout)  # as the screen does on mounting, before any step switch
        await pilot.pause()
        assert change.show_diff(layout, file=1)  # the file followed from the step before
        await pilot.pause()
        assert file_list.display and file_list.highlighted == 1
        assert diff.scroll_offset.y == layout.file_rows[1] > 0
        diff.focus()
        await pilot.pause()
        change.show_run("a run", "head", ["printed"], lambda: "foot")
        await pilot.pause()
        log = run.query_one(RichLog)
        assert run.display and not diff.display and not file_list.display  # no files to pick from
        assert pilot.app.focused is log is change.shown() and run.lines == ["printed"]
        change.show_diff(layout)
        await pilot.pause()
        assert pilot.app.focused is diff is change.shown() and not run.display
        assert change.show_diff(layout, files[0].hunks[0].lines[1])  # a search match: marked
        assert not change.show_diff(layout, Line("+", None, 9, "past the rows kept"))
        change.list_files(files[:1], 0)
        change.show_diff(layout)
        assert not file_list.display  # one file: no list

    app = drive(change, steps)
    assert app.heard == []  # the screen chose the file, not the reader: no message says otherwise


def test_the_run_panel_keeps_its_foot_current_and_draws_only_its_own_run():
    panel, seconds = RunPanel(), [0]

    def foot() -> str:
        return f"running · {seconds[0]} s"

    async def steps(pilot):
        shown = panel.query_one("#run-foot", Static)
        panel.show("a run", "head", ["one"], foot)
        assert shown.content == "running · 0 s"
        seconds[0] = 1
        await pilot.pause(0.7)  # the foot asks again every half second
        assert shown.content == "running · 1 s"
        panel.add("another run", "not this panel's")
        panel.add("a run", "two")
        await pilot.pause()
        assert panel.lines == ["one", "two"]
        panel.display, seconds[0] = False, 2
        await pilot.pause(0.7)
        assert shown.content == "running · 1 s"  # hidden: not asked
        panel.display = True
        updates, update = [], shown.update
        shown.update = lambda text: updates.append(text) or update(text)
        await pilot.pause(0.7)
        assert updates == ["running · 2 s"]  # once: the same foot is not drawn again
        await pilot.pause(0.7)
        assert updates == ["running · 2 s"]

    drive(panel, steps)


def test_the_title_bar_shows_a_title_as_written():
    bar = TitleBar()

    async def steps(pilot):
        bar.show("Step 3 · [b]not bold[/b]", "step-03 · unified")
        assert str(bar.query_one("#title").render()) == "Step 3 · [b]not bold[/b]"
        assert str(bar.query_one("#status").render()) == "step-03 · unified"

    drive(bar, steps)


def test_the_prompt_closes_itself_on_enter_and_esc_and_gives_focus_back():
    prompt = Prompt()

    async def steps(pilot):
        before = pilot.app.query_one("#elsewhere")
        before.focus()
        await pilot.pause()
        prompt.ask("jump", "Step number, then Enter")
        await pilot.press("4", "enter")
        assert not prompt.display and pilot.app.focused is before and prompt.purpose == "jump"
        prompt.ask("search", "Search")
        await pilot.press("x", "escape")
        assert not prompt.display and pilot.app.focused is before

    app = drive(prompt, steps)
    assert app.heard == ["4"]  # enter's message goes on up to the screen; esc's is no message


def test_a_narration_with_nothing_to_say_steps_aside():
    narration = Narration()

    async def steps(pilot):
        await narration.show(0, "  \n")
        assert narration.has_class("-empty") and narration.document is None
        await narration.show(1, "Why this step.")
        assert not narration.has_class("-empty") and narration.document is not None

    drive(narration, steps)


def test_the_step_list_moves_its_highlight_without_a_message(odd_repo):
    steps_list, series = StepList(), load_series(odd_repo)

    async def steps(pilot):
        steps_list.show_steps(series.steps)
        steps_list.point_at(3)
        assert steps_list.step_at[steps_list.highlighted] == 3

    app = drive(steps_list, steps)
    assert app.heard == []


def test_every_key_names_an_action_of_the_screen_or_the_app():
    for key in KEYS:
        name = key.action.split("(")[0]
        owner = WalkthroughApp if name.startswith("app.") else ReaderScreen
        assert callable(getattr(owner, "action_" + name.removeprefix("app."), None)), key


def test_the_narration_shows_the_document_made_ready_or_refills_the_one_shown():
    from textual.widgets import Markdown

    narration = Narration()

    async def steps(pilot):
        await narration.show(-1, "")  # a first step with nothing to say shows no document
        await narration.prepare({0: "Step one."})
        await narration.show(0, "Step one.")
        first = narration.document
        assert first.display and first.source == "Step one."
        await narration.prepare({1: "## Step two\n\nIts text.", 2: "  "})  # 2 has nothing to say
        [ready] = [shown for shown in narration.query_children(Markdown) if not shown.display]
        await narration.show(1, "## Step two\n\nIts text.")
        assert narration.document is ready and ready.display and not first.display
        await narration.prepare({0: "Step one."})  # the one made before for step 0 is kept
        assert list(narration.query_children(Markdown)) == [first, ready]
        await narration.show(7, "Far away.")  # nothing made ready: the shown one takes the text
        assert narration.document is ready and ready.source == "Far away."
        await narration.prepare({})
        assert list(narration.query_children(Markdown)) == [ready]

    drive(narration, steps)


# ---- Textual's public API only: no name of Textual's that starts with one underscore


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _textual(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "textual"


def _defines(tree: ast.AST) -> set[str]:
    """The private names `tree` (a module or a class) gives its namespace, and those its methods set
    on self or cls."""
    names = set()
    for item in getattr(tree, "body", []):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return set(filter(_private, names))


@functools.cache
def _textual_class_names(cls: type) -> frozenset[str]:
    """The private names one of Textual's classes defines, from its source."""
    source = textwrap.dedent(inspect.getsource(cls))
    return frozenset(_defines(ast.parse(source)) | set(filter(_private, vars(cls))))


@functools.cache
def _textual_names() -> frozenset[str]:
    """Every private name any of Textual's classes or modules defines, as installed."""
    names = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= _defines(tree)
        names.update(*(_defines(node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)))
    return frozenset(names)


def _module_defines(path: Path) -> set[str]:
    """The private names a module of the project's defines: its own, and its classes'."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    return _defines(tree).union(*map(_defines, classes))


def _private_textual_names(path: Path) -> list[str]:
    """Where the module at `path` uses a private name of Textual's: imports one (or from a private
    module); in a class of its own that derives from Textual's, defines or uses on self, cls or
    super() a private name one of its Textual bases has; or uses on anything else (an attribute, or
    a constant name given to getattr and the like) a private name one of Textual's classes has,
    which no module of the project's, this one or one it imports, defines for itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    has_classes = any(isinstance(node, ast.ClassDef) for node in ast.walk(tree))
    module = importlib.import_module(f"walkthrough.{path.stem}") if has_classes else None
    own = _module_defines(path)
    for node in ast.walk(tree):  # and the project's modules this one imports
        if isinstance(node, ast.ImportFrom) and (
            node.level or node.module.startswith("walkthrough")
        ):
            names = [alias.name for alias in node.names]
            for name in names if node.module in (None, "walkthrough") else [node.module]:
                imported = path.with_name(f"{name.split('.')[-1]}.py")
                if imported.exists() and imported != path:
                    own |= _module_defines(imported)
    found = []

    def visit(node: ast.AST, owner: object, inherited: frozenset[str]) -> None:
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ClassDef):
            owner = getattr(owner, node.name, None)
            bases = getattr(owner, "__mro__", ())
            inherited = frozenset().union(*(_textual_class_names(b) for b in bases if _textual(b)))
            defined = _defines(ast.Module(body=node.body, type_ignores=[])) & inherited
            found.extend(f"{where} {node.name} defines Textual's {name}" for name in defined)
        elif isinstance(node, ast.Import):
            found.extend(
                f"{where} import {alias.name}"
                for alias in node.names
                if alias.name.startswith("textual.") and any(map(_private, alias.name.split(".")))
            )
        elif isinstance(node, ast.ImportFrom) and not node.level:
            parts = node.module.split(".")
            names = [alias.name for alias in node.names]
            if parts[0] == "textual" and any(map(_private, parts + names)):
                found.append(f"{where} from {node.module} import {', '.join(names)}")
        else:
            used = None
            if isinstance(node, ast.Attribute):
                used, on = node.attr, node.value
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                used, on = node.args[1].value, node.args[0]
            if isinstance(used, str) and _private(used):
                on_self = getattr(on, "id", None) in ("self", "cls") or (
                    isinstance(on, ast.Call) and getattr(on.func, "id", None) == "super"
                )
                if used in inherited if on_self else used in _textual_names() and used not in own:
                    found.append(f"{where} .{used}")
        for child in ast.iter_child_nodes(node):
            visit(child, owner, inherited)

    visit(tree, module, frozenset())
    return found


def test_the_walkthrough_uses_no_private_textual_name():
    """Textual's public API only: a private name of Textual's may change in any release (the
    pyproject.toml pins no upper bound). The project's own private names are its own: an attribute
    on a Textual widget counts only where the widget's Textual bases have it (set on self it would
    overwrite theirs), and on any other object only where one of Textual's classes has it and the
    module, or a project module it imports, does not define it."""
    found = [
        use
        for path in sorted(Path(walkthrough.__file__).parent.glob("*.py"))
        for use in _private_textual_names(path)
    ]
    assert not found, "\n".join(found)
