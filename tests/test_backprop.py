"""part0/backprop.py (Part 0's final version) against torch.autograd: every hand-written gradient
equals autograd's to float64 rounding, on the script's own inputs and on shapes of our own; the
script's output is deterministic."""

import pytest
import torch
import torch.nn.functional as F

from helpers import run_python
from part0 import backprop


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("piece", list(backprop.PIECES))
def test_every_piece_against_autograd(piece, seed):
    gen = torch.Generator().manual_seed(seed)
    rows = backprop.PIECES[piece](
        lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64), gen
    )
    assert len(rows) >= 2
    for name, ours, theirs in rows:
        assert ours.shape == theirs.shape, name
        assert (ours - theirs).abs().max().item() <= 1e-12, name


def test_cross_entropy_is_stable_and_averages_over_every_position():
    logits, targets = 1000 * randn(1, 5, 7), torch.tensor([[0, 6, 3, 3, 1]])
    loss, cache = backprop.cross_entropy_forward(logits, targets)
    assert torch.allclose(loss, F.cross_entropy(logits.view(-1, 7), targets.view(-1)), rtol=1e-12)
    leaf = logits.clone().requires_grad_()
    (2 * F.cross_entropy(leaf.view(-1, 7), targets.view(-1))).backward()
    assert torch.allclose(backprop.cross_entropy_backward(2.0, cache), leaf.grad, atol=1e-15)


def test_linear_on_rows_and_without_bias():
    x, weight = randn(5, 3), randn(8, 3, seed=1)
    out, cache = backprop.linear_forward(x, weight, None)
    assert torch.allclose(out, F.linear(x, weight))
    dout = randn(5, 8, seed=2)
    dx, dweight, dbias = backprop.linear_backward(dout, cache)
    leaves = [x.clone().requires_grad_(), weight.clone().requires_grad_()]
    F.linear(*leaves).backward(dout)
    assert dbias is None
    assert torch.allclose(dx, leaves[0].grad) and torch.allclose(dweight, leaves[1].grad)


def test_layernorm_and_gelu_on_other_shapes():
    x, weight, bias = 3 + 5 * randn(4, 9), randn(9, seed=1), randn(9, seed=2)
    out, cache = backprop.layernorm_forward(x, weight, bias)
    leaves = [t.clone().requires_grad_() for t in (x, weight, bias)]
    expected = F.layer_norm(leaves[0], (9,), leaves[1], leaves[2])
    dout = randn(4, 9, seed=3)
    expected.backward(dout)
    assert torch.allclose(out, expected, atol=1e-12)
    for ours, leaf in zip(backprop.layernorm_backward(dout, cache), leaves):
        assert torch.allclose(ours, leaf.grad, atol=1e-12)

    x = 4 * randn(2, 3, 5)
    out, cache = backprop.gelu_forward(x)
    leaf = x.clone().requires_grad_()
    F.gelu(leaf, approximate="tanh").backward(torch.ones_like(x))
    assert torch.allclose(out, F.gelu(x, approximate="tanh"), atol=1e-14)
    assert torch.allclose(backprop.gelu_backward(torch.ones_like(x), cache), leaf.grad, atol=1e-14)


def run(*flags):
    return run_python("part0/backprop.py", *flags)


def test_the_script_passes_and_repeats_itself():
    first, second = run(), run()
    assert first.returncode == 0 and first.stdout == second.stdout
    lines = first.stdout.splitlines()
    assert len(lines) == 33 and lines[-1] == "31 of 31 within 1e-12"
    # rounding, shown as a bound on any machine
    assert all(line.endswith("  <1e-13") for line in lines[1:-1])
    assert run("--dtype", "float32", "--only", "layernorm", "gelu").stdout.endswith(
        "6 of 6 within 1e-05\n"
    )


@pytest.mark.parametrize(
    "flags", [["--dtype", "float16"], ["--only", "attention"], ["--only"], ["--seed", "x"]]
)
def test_a_bad_flag_is_one_line(flags):
    done = run(*flags)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("backprop.py: error:"), (
        done.stderr
    )


def test_a_wrong_gradient_fails_the_run(monkeypatch, capsys):
    right = backprop.linear_backward
    monkeypatch.setattr(
        backprop, "linear_backward", lambda dout, cache: [2 * g for g in right(dout, cache)]
    )
    assert backprop.main(["--only", "linear"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 of 4 within 1e-12"
    # a mistake prints its size
    wrong = [line for line in out[1:-1] if not line.endswith("  <1e-13")]
    assert len(wrong) == 3 and all(float(line.split()[-1]) > 1e-12 for line in wrong), out
