"""
Plot a training log (log.txt from train_gpt2.py) against OpenAI's GPT-2 124M and GPT-3 124M:

    python -m tools.plot_log log/cpu                    # the CPU demo's run: log/cpu/curves.png
    python -m tools.plot_log log --fineweb --watch 60   # the real run, redrawn every minute
"""

import math
import os
import signal
import sys
import time
from collections import defaultdict

from longrun.common import ArgumentParser, UserError, lock_folder, run_cli, write_atomically
from longrun.flags import positive_float
from longrun.run_folder import read_log

# the bars to beat: OpenAI's GPT-2 124M checkpoint on FineWeb-Edu val (the lecture's figure); on
# HellaSwag, GPT-2 124M as our scorer rates it (acc_norm 0.2955, the lecture's figure) and GPT-3
# 124M (the GPT-3 paper)
GPT2_124M_VAL_LOSS = 3.2924
GPT2_124M_HELLASWAG = 0.2955
GPT3_124M_HELLASWAG = 0.337
# what a run logs at every step besides its loss: a spike in the loss shows first in the gradient
# norm
HEALTH = {
    "lr": "learning rate",
    "norm": "gradient norm (before clipping)",
    "tok_s": "tokens per second",
    "mfu": "MFU (%)",
}
# the loss axis leaves out the first tenth of the run: the fall from ~10.8 would squash the tenths
# of a nat that separate a finished run from the bar to a sliver at the bottom
ZOOM_FROM = 0.1


def read_series(path):
    """{"train": [(step, value), ...], "val": [...], "hella": [...]} from the `{step} {kind}
    {value}` lines."""
    series = defaultdict(list)
    for line in read_log(path)[1]:
        step, kind, value = line.split()
        series[kind].append((int(step), float(value)))
    return series


def summary(series, fineweb):
    """One line per series: where it starts and ends, beside the bar it is plotted against."""
    bars = {
        "hella": f" (OpenAI GPT-2 124M: {GPT2_124M_HELLASWAG}, GPT-3 124M: {GPT3_124M_HELLASWAG})"
    }
    if fineweb:
        bars["val"] = f" (OpenAI GPT-2 124M: {GPT2_124M_VAL_LOSS})"
    for kind, points in series.items():
        if not points:
            continue
        (first_step, first), (last_step, last) = points[0], points[-1]
        print(
            f"{kind}: {first:g} at step {first_step} -> {last:g} at step "
            f"{last_step}{bars.get(kind, '')}"
        )


def zoomed(series, baseline):
    """The loss axis's limits without the first tenth of the run, and with the bar; None where that
    gains little (a short run, whose whole fall is the interesting part) or there is no loss yet."""
    last_step = max(step for points in series.values() for step, _ in points)
    bar = [baseline] if baseline else []
    # inf, NaN: no limit
    every = [v for kind in ("train", "val") for _, v in series[kind] if math.isfinite(v)] + bar
    later = [
        v for kind in ("train", "val") for step, v in series[kind] if step >= ZOOM_FROM * last_step
    ]
    later = [v for v in later if math.isfinite(v)] + bar
    if not later or max(later) - min(later) > 0.5 * (max(every) - min(every)):
        return None
    # a single value would make an axis of zero height
    margin = 0.05 * (max(later) - min(later)) or 0.1
    return min(later) - margin, max(later) + margin


def plot(series, fineweb, full):
    """The figure: losses, and HellaSwag beside them when the run scored it; below, the run's
    health, where logged."""
    # a figure of our own: no pyplot, no window, no global state
    from matplotlib.figure import Figure

    # a run without HellaSwag (the cpu preset) gets no empty panel
    panels = 2 if series["hella"] else 1
    health = [kind for kind in HEALTH if series[kind]]
    # grid columns: each row's panels share the whole width, none left empty
    width = panels * max(len(health), 1)
    fig = Figure(figsize=(5 * max(panels, len(health)), 4 * (1 + bool(health))))
    grid = fig.add_gridspec(1 + bool(health), width)
    top = [
        fig.add_subplot(grid[0, i * width // panels : (i + 1) * width // panels])
        for i in range(panels)
    ]
    plot_loss(top[0], series, GPT2_124M_VAL_LOSS if fineweb else None, full)
    if series["hella"]:
        plot_hellaswag(top[1], series["hella"])
    for i, kind in enumerate(health):
        ax = fig.add_subplot(grid[1, i * width // len(health) : (i + 1) * width // len(health)])
        ax.plot(*zip(*series[kind]))
        ax.set(xlabel="step", title=HEALTH[kind])
    fig.tight_layout()
    return fig


def plot_loss(ax, series, baseline, full):
    if series["train"]:
        ax.plot(*zip(*series["train"]), label="train loss", alpha=0.6)
    # few points: markers show where the measurements are, the lines only join them
    if series["val"]:
        ax.plot(*zip(*series["val"]), "o-", markersize=4, label="val loss")
    if baseline:
        ax.axhline(baseline, color="r", linestyle="--", label=f"OpenAI GPT-2 124M val ({baseline})")
    title = "loss"
    if not full and (limits := zoomed(series, baseline)):
        ax.set_ylim(*limits)
        title += f" (the first {ZOOM_FROM:.0%} of the run is off the top: --full)"
    ax.set(xlabel="step", ylabel="loss", title=title)
    ax.legend()


def plot_hellaswag(ax, points):
    ax.plot(*zip(*points), "o-", markersize=4, label="this run")
    ax.axhline(
        GPT2_124M_HELLASWAG,
        color="r",
        linestyle="--",
        label=f"OpenAI GPT-2 124M ({GPT2_124M_HELLASWAG})",
    )
    ax.axhline(
        GPT3_124M_HELLASWAG,
        color="g",
        linestyle="--",
        label=f"OpenAI GPT-3 124M ({GPT3_124M_HELLASWAG})",
    )
    ax.set(xlabel="step", ylabel="accuracy", title="HellaSwag (acc_norm)")
    ax.legend()


def draw(series, out, fineweb, full):
    """Write the PNG, whole or not at all: a viewer may be reading the one before."""
    fig = plot(series, fineweb, full)
    try:
        write_atomically(
            out, lambda f: fig.savefig(f, format=os.path.splitext(out)[1][1:], dpi=100)
        )
    except ValueError as e:  # matplotlib: a format it cannot write, such as .txt
        raise UserError(f"cannot write {out}: {e}") from None
    summary(series, fineweb)
    print(f"wrote {out}", flush=True)


def stop_watching(signum, frame):
    raise KeyboardInterrupt


def running(folder):
    """Whether a run holds its folder: train_gpt2.py locks it for as long as it runs."""
    try:
        lock_folder(folder, hold=False)
    except UserError:
        return True
    return False


def watch(log, out, every, fineweb, full):
    """Redraw whenever the log has changed, looking every `every` seconds, until the run ends or
    Ctrl-C."""
    seen = None
    # SIGTERM (kill, a closing tmux) ends it as Ctrl-C does
    signal.signal(signal.SIGTERM, stop_watching)
    if not os.path.isfile(log):
        print(f"waiting for {log}: the run has not written it yet", file=sys.stderr)
    try:
        while True:
            stat = os.stat(log) if os.path.isfile(log) else None
            if stat and (stat.st_size, stat.st_mtime_ns) != seen:
                seen = stat.st_size, stat.st_mtime_ns
                if series := read_series(log):  # no step line yet: the run is still starting
                    draw(series, out, fineweb, full)
            # drawn as it ended: nothing more will come
            if stat and not running(os.path.dirname(log)):
                print(f"{log}: no run is writing it: stopped watching", flush=True)
                return 0
            time.sleep(every)
    except KeyboardInterrupt:  # the way to stop watching, not a failure
        return 0


def main(argv=None):
    p = ArgumentParser(description="Plot train/val loss and HellaSwag from a train_gpt2.py log.")
    p.add_argument("log", help="log.txt written by train_gpt2.py, or its run folder (--log-dir)")
    p.add_argument("-o", "--out", help="the PNG to write (default: curves.png beside the log)")
    p.add_argument(
        "--fineweb",
        action="store_true",
        help="the run validated on fineweb.py's FineWeb-Edu shards: draw GPT-2 124M's val loss "
        f"there ({GPT2_124M_VAL_LOSS}, the lecture's figure); the log does not say which data a "
        "run used",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="the whole loss range (default: from a tenth into the run)",
    )
    p.add_argument(
        "--watch",
        type=positive_float,
        metavar="SECONDS",
        help="redraw every SECONDS until the run ends",
    )
    args = p.parse_args(argv)
    return run_cli("plot_log.py", lambda: run(args))


def run(args):
    # a folder's log.txt; a folder not made yet (--watch started before the run) is a folder if not
    # a .txt
    log = (
        args.log
        if os.path.isfile(args.log) or args.log.endswith(".txt")
        else os.path.join(args.log, "log.txt")
    )
    if not (os.path.isfile(log) or args.watch):
        raise UserError(f"no log at {log}")
    out = args.out or os.path.join(os.path.dirname(log), "curves.png")
    # what matplotlib writes for a name without a suffix
    out = out if os.path.splitext(out)[1] else out + ".png"
    if args.watch:
        return watch(log, out, args.watch, args.fineweb, args.full)
    if not (series := read_series(log)):
        raise UserError(f"{log} holds no log lines")
    draw(series, out, args.fineweb, args.full)


if __name__ == "__main__":
    sys.exit(main())
