"""
Plot a training log (log/log.txt from train_gpt2.py) against OpenAI's GPT-2 124M and GPT-3 124M:

    python plot_log.py log/log.txt -o log/curves.png
"""

import os
import sys
from collections import defaultdict

from common import ArgumentParser, UserError, run_cli
from train_gpt2 import read_log

# the bars to beat: OpenAI's GPT-2 124M checkpoint on FineWeb-Edu val (the lecture's figure); on HellaSwag, GPT-2
# 124M as hellaswag_scoring.py scores it (acc_norm 0.2955, the lecture's figure) and GPT-3 124M (the GPT-3 paper)
GPT2_124M_VAL_LOSS = 3.2924
GPT2_124M_HELLASWAG = 0.2955
GPT3_124M_HELLASWAG = 0.337


def read_series(path):
    """{"train": [(step, value), ...], "val": [...], "hella": [...]} from the `{step} {kind} {value}` lines."""
    series = defaultdict(list)
    for line in read_log(path)[1]:
        step, kind, value = line.split()
        series[kind].append((int(step), float(value)))
    return series


def summary(series):
    """One line per series: where it starts and ends, beside the bar it is plotted against."""
    bars = {
        "val": f" (OpenAI GPT-2 124M: {GPT2_124M_VAL_LOSS})",
        "hella": f" (OpenAI GPT-2 124M: {GPT2_124M_HELLASWAG}, GPT-3 124M: {GPT3_124M_HELLASWAG})",
    }
    for kind, points in series.items():
        if not points:
            continue
        (first_step, first), (last_step, last) = points[0], points[-1]
        print(f"{kind}: {first:g} at step {first_step} -> {last:g} at step {last_step}{bars.get(kind, '')}")


def plot(series, out):
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_hella) = plt.subplots(1, 2, figsize=(14, 5))
    for kind, label in (("train", "train loss"), ("val", "val loss")):
        if series[kind]:
            ax_loss.plot(*zip(*series[kind]), label=label, alpha=0.6 if kind == "train" else 1.0)
    ax_loss.axhline(
        GPT2_124M_VAL_LOSS, color="r", linestyle="--", label=f"OpenAI GPT-2 124M val ({GPT2_124M_VAL_LOSS})"
    )
    ax_loss.set(xlabel="step", ylabel="loss", title="loss")
    ax_loss.legend()
    if series["hella"]:
        ax_hella.plot(*zip(*series["hella"]), label="this run")
    ax_hella.axhline(GPT2_124M_HELLASWAG, color="r", linestyle="--", label=f"OpenAI GPT-2 124M ({GPT2_124M_HELLASWAG})")
    ax_hella.axhline(GPT3_124M_HELLASWAG, color="g", linestyle="--", label=f"OpenAI GPT-3 124M ({GPT3_124M_HELLASWAG})")
    ax_hella.set(xlabel="step", ylabel="accuracy", title="HellaSwag (acc_norm)")
    ax_hella.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv=None):
    p = ArgumentParser(description="Plot train/val loss and HellaSwag from a train_gpt2.py log.")
    p.add_argument("log", help="log.txt written by train_gpt2.py")
    p.add_argument("-o", "--out", default="curves.png", help="the PNG to write")
    args = p.parse_args(argv)
    return run_cli("plot_log.py", lambda: run(args.log, args.out))


def run(log, out):
    if not os.path.isfile(log):
        raise UserError(f"no log at {log}")
    series = read_series(log)
    if not any(series.values()):
        raise UserError(f"{log} holds no log lines")
    out = out if os.path.splitext(out)[1] else out + ".png"  # what matplotlib writes for a name without a suffix
    try:
        plot(series, out)
    except ValueError as e:  # matplotlib: a format it cannot write, such as .txt
        raise UserError(f"cannot write {out}: {e}") from None
    summary(series)
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
