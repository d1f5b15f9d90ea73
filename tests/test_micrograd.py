"""micrograd.py (Part 0's final version) against PyTorch: every gradient a Value computes equals
torch.autograd's in float64, the MLP is the function its parameters say, and the training demo does
what its narration promises."""

import math
import random
import subprocess
import sys

import pytest
import torch

from helpers import ROOT, run_python
from part0 import micrograd
from part0.micrograd import MLP, Value


def both(f, *xs):
    """f on Values and on torch float64 scalars: ((value, grads) ours, (value, grads) torch's)."""
    values = [Value(x) for x in xs]
    out = f(*values)
    out.backward()
    tensors = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    expected = f(*tensors)
    expected.backward()
    return (out.data, [v.grad for v in values]), (expected.item(), [t.grad.item() for t in tensors])


EXPRESSIONS = {
    "the Try-it's": (lambda x, y: (x * y + x.exp()).tanh() * y - x**2 / 2, (0.5, -1.5)),
    "mirrored numbers": (lambda a, b: (2.0 - a) / (3.0 + b * b) + 1.0 / a - 4.0 * b, (0.8, -0.3)),
    "powers": (lambda a, b: a**3 * b**-2 + a**0.5, (1.3, 0.7)),
    "used three times": (lambda a, b: a * a * a + a * b, (-0.9, 0.4)),
    "a diamond of unequal paths": (
        lambda a, b: (lambda u: u + u.tanh().exp().tanh())(a * b),
        (0.6, -0.9),
    ),
    "a deep chain": (lambda a, b: ((((a + b).tanh() * 2).exp() - 1) ** 2).tanh(), (0.2, 0.1)),
}


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_gradients_equal_torchs(name):
    f, xs = EXPRESSIONS[name]
    (value, grads), (expected, expected_grads) = both(f, *xs)
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-14)
    assert grads == pytest.approx(expected_grads, rel=1e-12, abs=1e-14)


def test_a_value_used_twice_adds_up():
    a = Value(3.0)
    (a * a + a).backward()
    assert a.grad == 7.0  # 2a + 1


def test_finite_difference():
    def f(x):
        return (x * -1.5 + x.exp()).tanh() * -1.5 - x**2 / 2

    x, h = Value(0.5), 1e-6
    f(x).backward()
    assert x.grad == pytest.approx(
        (f(Value(0.5 + h)).data - f(Value(0.5 - h)).data) / (2 * h), abs=1e-8
    )


def test_records_its_operation():
    x = Value(2.0)
    assert (x * 3).op == "*" and (x + 1).op == "+" and x.tanh().op == "tanh" and x.op == ""
    assert repr(x.exp()) == f"Value({math.exp(2):.6f}, grad=0.000000, op=exp)"


def test_mlp_against_torch():
    model = MLP(3, [4, 5, 2], random.Random(1))
    params = model.parameters()
    assert len(params) == (3 * 4 + 4) + (4 * 5 + 5) + (5 * 2 + 2)
    x = [0.3, -0.8, 1.1]
    out = model(x)
    loss = (out[0] - 1) ** 2 + out[1] ** 2
    loss.backward()

    # the same network in torch, weights read layer by layer, neuron by neuron: w then b
    leaves = [torch.tensor(p.data, dtype=torch.float64, requires_grad=True) for p in params]
    h, at = torch.tensor(x, dtype=torch.float64), 0
    for i, (nin, nout) in enumerate([(3, 4), (4, 5), (5, 2)]):
        W = torch.stack(
            [
                torch.stack(leaves[at + k * (nin + 1) : at + k * (nin + 1) + nin])
                for k in range(nout)
            ]
        )
        b = torch.stack([leaves[at + k * (nin + 1) + nin] for k in range(nout)])
        at += nout * (nin + 1)
        h = W @ h + b
        h = h.tanh() if i < 2 else h
    expected = (h[0] - 1) ** 2 + h[1] ** 2
    expected.backward()
    assert [v.data for v in out] == pytest.approx(h.tolist(), rel=1e-12)
    assert [p.grad for p in params] == pytest.approx(
        [t.grad.item() for t in leaves], rel=1e-10, abs=1e-14
    )


def losses(*flags):
    done = subprocess.run(
        [sys.executable, "part0/micrograd.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [
        float(line.split("loss ")[1])
        for line in done.stdout.splitlines()
        if line.startswith("step")
    ]


def test_training_falls_and_the_bug_does_not():
    good, bad = losses(), losses("--no-zero-grad")
    assert len(good) == 60 and good[-1] < 0.02 * good[0]
    # after the first step, steadily down
    assert all(later <= earlier for earlier, later in zip(good[1:], good[2:]))
    # the first two steps see no leftover gradient (the first backward starts from 0)
    assert good[:2] == bad[:2]
    assert max(bad[2:]) > bad[0] and bad[-1] > 10 * good[-1]


def test_main_is_deterministic(capsys):
    printed = []
    for _ in range(2):
        micrograd.main(["--steps", "5", "--seed", "3"])
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and printed[0].count("\nstep") == 5


@pytest.mark.parametrize(
    "flags",
    [
        ["--steps", "0"],
        ["--lr", "nan"],
        ["--lr", "-1"],
        ["--steps", "x"],
        ["--bogus"],
        ["--points", "501"],
    ],
)
def test_a_bad_flag_is_one_line(flags):
    done = run_python("part0/micrograd.py", *flags)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("micrograd.py: error:"), (
        done.stderr
    )


def test_parse_args_defaults():
    args = micrograd.parse_args([])
    assert (args.steps, args.lr, args.points, args.seed, args.no_zero_grad) == (
        60,
        0.2,
        16,
        0,
        False,
    )
