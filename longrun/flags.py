"""The argparse types that check the flags of train_gpt2.py (and the tools that share them) as they
are read: a bad value is one line and exit status 1, before anything runs."""

import math
from argparse import ArgumentTypeError

from longrun.common import count


def whole(text):
    return 0 if float(text) == 0 else count(text)


def random_seed(text):
    # numpy's default_rng and torch.manual_seed both take these
    if not 0 <= (value := int(text)) < 2**63:
        raise ArgumentTypeError(f"expected a whole number from 0 to 2**63 - 1, got {text!r}")
    return value


def positive_float(text):
    if not (math.isfinite(value := float(text)) and value > 0):
        raise ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def fraction(text):
    if not 0 <= (value := float(text)) <= 1:  # nan fails too
        raise ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def device_name(text):
    """--device: auto, or a device that torch can use on this machine (cpu, cuda, cuda:N, mps)."""
    import torch  # here, not above: fineweb.py shares this module and needs no torch

    if text == "auto":
        return text
    try:
        kind = torch.device(text).type
    except RuntimeError:
        raise ArgumentTypeError(
            f"{text!r} is not a device: use auto, cpu, cuda, cuda:N or mps"
        ) from None
    gpu = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
    if kind != "cpu" and kind not in gpu:
        raise ArgumentTypeError(f"{text}: only cpu, cuda and mps are supported")
    if kind in gpu and not gpu[kind]():
        raise ArgumentTypeError(f"{text}: this machine has no {kind} GPU that torch can use")
    return text
