import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from longrun.common import lock_folder
from tools import plot_log

PNG = b"\x89PNG\r\n\x1a\n"


def log_lines(steps, val_every, hella_every=0):
    """A run's log: train loss falling from ~10.9 towards 3.0 over `steps` steps, val (and
    HellaSwag) now and then."""
    lines = []
    for step in range(steps):
        loss = 3.0 + 7.9 / (1 + step / 20)
        if step % val_every == 0:
            lines.append(f"{step} val {loss + 0.05:.4f}\n")
        if hella_every and step % hella_every == 0:
            lines.append(f"{step} hella {0.25 + step / steps / 10:.4f}\n")
        lines.append(f"{step} train {loss:.6f}\n")
    return "".join(lines)


def test_plot_writes_a_png(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(
        "0 val 10.9\n0 hella 0.2500\n0 train 10.95\n1 train 9.5\n250 val 4.1\n250 hella 0.2600\n"
    )
    series = plot_log.read_series(log)
    assert series["train"] == [(0, 10.95), (1, 9.5)] and series["hella"][-1] == (250, 0.26)
    out = tmp_path / "curves.png"
    assert plot_log.main([str(log), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG


def test_bad_log_line_names_its_line(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text("0 train 10.9\n1 train\n")
    assert plot_log.main([str(log), "-o", str(tmp_path / "x.png")]) == 1
    assert "log.txt:2:" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    assert plot_log.main([str(tmp_path / "missing.txt")]) == 1


def lines_of(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_a_run_without_hellaswag_gets_no_hellaswag_panel_and_no_fineweb_bar_unless_told(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(log_lines(20, val_every=5))
    (ax,) = plot_log.plot(plot_log.read_series(log), fineweb=False, full=False).axes
    assert set(lines_of(ax)) == {"train loss", "val loss"}
    # four points: each measurement shown, not only a line
    assert lines_of(ax)["val loss"].get_marker() == "o"

    log.write_text(log_lines(20, val_every=5, hella_every=10))
    ax_loss, ax_hella = plot_log.plot(plot_log.read_series(log), fineweb=True, full=False).axes
    bar = lines_of(ax_loss)["OpenAI GPT-2 124M val (3.2924)"]
    assert list(bar.get_ydata()) == [3.2924, 3.2924]
    assert lines_of(ax_hella)["this run"].get_marker() == "o"


def test_the_loss_axis_zooms_on_a_long_run_only(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(log_lines(1000, val_every=50))
    series = plot_log.read_series(log)
    (ax,) = plot_log.plot(series, fineweb=True, full=False).axes
    low, high = ax.get_ylim()
    assert low < 3.2924 < high < 5, (
        "the last nine tenths of the run and the bar fill the axis, 10.9 is off the top"
    )
    assert "off the top" in ax.get_title()
    (ax,) = plot_log.plot(series, fineweb=True, full=True).axes
    assert ax.get_ylim()[1] > 10.9
    # on a short run the fall from ~10.9 is the curve: the whole of it stays
    log.write_text(log_lines(20, val_every=5))
    (ax,) = plot_log.plot(plot_log.read_series(log), fineweb=False, full=False).axes
    assert ax.get_ylim()[1] > 10.9 and ax.get_title() == "loss"


def test_a_run_folder_gets_its_curves_beside_its_log(tmp_path, capsys):
    (tmp_path / "log.txt").write_text(log_lines(3, val_every=2))
    assert plot_log.main([str(tmp_path)]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {tmp_path / 'curves.png'}"
    (tmp_path / "empty").mkdir()
    assert plot_log.main([str(tmp_path / "empty")]) == 1
    assert (
        capsys.readouterr().err.strip()
        == f"plot_log.py: error: no log at {tmp_path / 'empty' / 'log.txt'}"
    )


def test_watch_redraws_when_the_log_changes_and_stops_when_the_run_ends(
    tmp_path, capsys, monkeypatch
):
    log = tmp_path / "log.txt"
    log.write_text("# run 0123456789ab\n")  # a run that has not logged a step yet
    held = lock_folder(tmp_path)  # the run's own lock, which it holds while it runs
    run = ["0 val 10.9\n0 train 10.95\n", "1 train 9.5\n", "", "2 train 9.1\n", None]
    naps = []

    # instead of sleeping: the run logs its lines, then nothing, then more, then it ends
    def nap(seconds):
        naps.append(seconds)
        news = run[len(naps) - 1]
        if news is None:
            held.close()
        elif news:
            with open(log, "a") as f:
                f.write(news)

    monkeypatch.setattr(plot_log.time, "sleep", nap)
    assert plot_log.main([str(log), "--watch", "0.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert naps == [0.5] * 5
    # drawn when lines came, never without news; after the run ended, nothing more to wait for
    assert [line for line in out if line.startswith("wrote")] == [
        f"wrote {tmp_path / 'curves.png'}"
    ] * 3
    assert out[-3:] == [
        "train: 10.95 at step 0 -> 9.1 at step 2",
        f"wrote {tmp_path / 'curves.png'}",
        f"{log}: no run is writing it: stopped watching",
    ]
    # no temporary file
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "curves.png", "log.txt"]


@pytest.mark.parametrize("seconds", ["0", "-1", "soon"])
def test_watch_needs_a_positive_interval(tmp_path, capsys, seconds):
    with pytest.raises(SystemExit) as exit:
        plot_log.main([str(tmp_path), "--watch", seconds])
    assert exit.value.code == 1 and "--watch" in capsys.readouterr().err


def test_the_run_s_health_gets_a_row_of_its_own(tmp_path):
    log = tmp_path / "log.txt"
    health = "".join(
        f"{step} lr {6e-4 * (step + 1) / 10:.4e}\n{step} norm {5.0 / (step + 1):.4f}\n"
        for step in range(10)
    )
    log.write_text(log_lines(10, val_every=5, hella_every=5) + health)
    fig = plot_log.plot(plot_log.read_series(log), fineweb=False, full=False)
    loss, hella, lr, norm = [ax for ax in fig.axes if ax.axison]
    assert (lr.get_title(), norm.get_title()) == (
        "learning rate",
        "gradient norm (before clipping)",
    )
    assert list(norm.get_lines()[0].get_ydata()) == pytest.approx(
        [5.0 / (step + 1) for step in range(10)], abs=1e-4
    )
    assert len(fig.axes) == 4  # two rows of two: no place left empty


def test_watch_waits_for_a_run_not_started_yet_and_sigterm_ends_it(tmp_path):
    """--watch started before the run: it waits for the log (it exited at once); SIGTERM ends it
    with status 0."""
    run_dir = tmp_path / "log" / "cpu"  # not made yet
    watcher = subprocess.Popen(
        [sys.executable, "-m", "tools.plot_log", str(run_dir), "--watch", "0.2"],
        cwd=Path(__file__).resolve().parents[1],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert (
        watcher.stderr.readline()
        == f"waiting for {run_dir / 'log.txt'}: the run has not written it yet\n"
    )
    run_dir.mkdir(parents=True)
    held = lock_folder(run_dir)  # the run, running
    (run_dir / "log.txt").write_text("# run abc\n0 train 10.9\n1 train 10.2\n2 train 9.8\n")
    for _ in range(1200):  # a deadline against hanging, not a timing
        if (run_dir / "curves.png").exists():
            break
        time.sleep(0.05)
    assert (run_dir / "curves.png").exists()
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(timeout=300) == 0 and "Traceback" not in watcher.stderr.read()
    held.close()


def test_a_diverged_value_is_drawn_around_not_a_crash(tmp_path):
    """A run that diverged logs `inf` or `nan` (step 41 stops it): the zoomed axis is
    the finite values'."""
    log = tmp_path / "log.txt"
    log.write_text(log_lines(1000, val_every=50) + "1000 val inf\n1000 train nan\n")
    (ax,) = plot_log.plot(plot_log.read_series(log), fineweb=True, full=False).axes
    low, high = ax.get_ylim()
    assert low < 3.2924 < high < 5 and "off the top" in ax.get_title()
    assert plot_log.main([str(log), "-o", str(tmp_path / "curves.png")]) == 0


def test_a_run_without_hellaswag_gets_its_loss_across_the_whole_width(tmp_path):
    """The CPU demo logs no HellaSwag but three health lines: the loss is the top row, none of
    it left blank."""
    log = tmp_path / "log.txt"
    health = "".join(
        f"{s} lr {6e-4:.4e}\n{s} norm {5.0 / (s + 1):.4f}\n{s} tok_s {1000 + s}\n"
        for s in range(20)
    )
    log.write_text(log_lines(20, val_every=5) + health)
    fig = plot_log.plot(plot_log.read_series(log), fineweb=False, full=False)
    loss, *row = fig.axes
    assert len(row) == 3 and all(ax.axison for ax in fig.axes)
    left, right = loss.get_position(), row[-1].get_position()
    assert (
        loss.get_title() == "loss" and left.x0 == row[0].get_position().x0 and left.x1 == right.x1
    )
