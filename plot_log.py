"""
Plot a training log (log/log.txt from train_gpt2.py) against OpenAI's GPT-2 124M and GPT-3 124M:

    python plot_log.py log/log.txt -o log/curves.png
"""

import argparse
import sys
from collections import defaultdict

# the bars to beat: OpenAI's GPT-2 124M checkpoint evaluated on FineWeb-Edu val, and the two HellaSwag scores
GPT2_124M_VAL_LOSS = 3.2924
GPT2_124M_HELLASWAG = 0.2945
GPT3_124M_HELLASWAG = 0.337


def read_log(path):
    """{"train": [(step, value), ...], "val": [...], "hella": [...]} from `{step} {kind} {value}` lines."""
    series = defaultdict(list)
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                step, kind, value = line.split()
                series[kind].append((int(step), float(value)))
            except ValueError:
                raise ValueError(f"{path}:{number}: expected '<step> <train|val|hella> <value>', got {line.strip()!r}")
    return series


def plot(series, out):
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_hella) = plt.subplots(1, 2, figsize=(14, 5))
    for kind, label in (("train", "train loss"), ("val", "val loss")):
        if series[kind]:
            ax_loss.plot(*zip(*series[kind]), label=label, alpha=0.6 if kind == "train" else 1.0)
    ax_loss.axhline(GPT2_124M_VAL_LOSS, color="r", linestyle="--", label=f"OpenAI GPT-2 124M val ({GPT2_124M_VAL_LOSS})")
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
    p = argparse.ArgumentParser(description="Plot train/val loss and HellaSwag from a train_gpt2.py log.")
    p.add_argument("log", help="log.txt written by train_gpt2.py")
    p.add_argument("-o", "--out", default="curves.png", help="the PNG to write")
    args = p.parse_args(argv)
    try:
        series = read_log(args.log)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not any(series.values()):
        print(f"error: {args.log} holds no log lines", file=sys.stderr)
        return 1
    plot(series, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
