"""Checks for Part 0: gradients by hand, from one number at a time (micrograd.py's `Value`, a small
MLP of them) to GPT-2's pieces on tensors (backprop.py's forward and backward functions).

Every number is checked against PyTorch in float64, on inputs the check makes itself (seeded):
torch.autograd is the oracle, never our text. The checks go from the simplest case up (one
operation, a chain, a Value used twice, two paths of different lengths, random expressions), so that
the first one to fail names the rule a wrong engine breaks.
"""

from __future__ import annotations

import math
import random

from .core import CheckFailed, check, expect, expect_close, printed, step_lines

# --------------------------------------------------------------------------------------------------
# micrograd: Values against torch's float64 scalars


def on_values(tree, Value, f, xs, what):
    """f applied to Values made from the numbers xs, then backward(): (the output's data,
    each input's grad)."""
    inputs = [Value(x) for x in xs]
    with tree.expecting(what, "it to compute and backward()"):
        out = f(*inputs)
        out.backward()
        return out.data, [v.grad for v in inputs]


def on_torch(f, xs):
    """The same with torch's float64 scalars and torch.autograd: (the output,
    each input's gradient)."""
    import torch

    inputs = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in xs]
    out = f(*inputs)
    out.backward()
    return out.item(), [0.0 if t.grad is None else t.grad.item() for t in inputs]


def named(xs):
    return ", ".join(f"{name}={x:g}" for name, x in zip("abc", xs))


def same_as_torch(tree, Value, text, f, xs, why="", context=""):
    """f's value and gradients on Values equal torch's (to float64 rounding); a failure names the
    derivative and the `context`, and `why` says which rule a wrong gradient breaks."""
    data, grads = on_values(tree, Value, f, xs, f"{text} with Values {named(xs)}{context}")
    expected_data, expected_grads = on_torch(f, xs)
    expect_close(f"{text} at {named(xs)}{context}", expected_data, data, rel=1e-9, abs_=1e-12)
    for name, expected, found in zip("abc", expected_grads, grads):
        if not abs(found - expected) <= 1e-9 * max(1.0, abs(expected)):  # NaN fails too
            raise CheckFailed(
                f"d({text})/d{name} at {named(xs)}{context}: "
                f"expected {expected:.6g} (torch float64), found {found:.6g}{why}"
            )


# each operation on inputs that feed nothing else: a wrong local derivative shows here first
PRIMITIVES = [
    ("a + b", lambda a, b: a + b, (0.7, -1.3)),
    ("a * b", lambda a, b: a * b, (0.7, -1.3)),
    ("a ** 3", lambda a: a**3, (-0.8,)),
    ("a ** -0.5", lambda a: a**-0.5, (1.7,)),
    ("a.exp()", lambda a: a.exp(), (0.7,)),
    ("a.tanh()", lambda a: a.tanh(), (0.7,)),
    ("a + 2", lambda a: a + 2.0, (0.7,)),
    ("a * 3", lambda a: a * 3.0, (0.7,)),
    ("2 + a", lambda a: 2.0 + a, (0.7,)),
    ("3 * a", lambda a: 3.0 * a, (0.7,)),
]
COMPOSED = [  # made of the primitives: -, / and their mirrored forms
    ("-a", lambda a: -a, (0.7,)),
    ("a - b", lambda a, b: a - b, (0.7, -1.3)),
    ("a / b", lambda a, b: a / b, (0.7, -1.3)),
    ("a - 1", lambda a: a - 1.0, (0.7,)),
    ("a / 4", lambda a: a / 4.0, (0.7,)),
    ("2 - a", lambda a: 2.0 - a, (0.7,)),
    ("2 / a", lambda a: 2.0 / a, (0.7,)),
]
CHAIN = ("((a * b).tanh() + 1) ** 2", lambda a, b: ((a * b).tanh() + 1.0) ** 2, (0.7, -1.3))
USED_TWICE = [
    ("a + a", lambda a: a + a, (1.5,)),
    ("a * a", lambda a: a * a, (1.5,)),
    ("a * b + a", lambda a, b: a * b + a, (1.5, -0.4)),
]
# u reaches the output directly and through three more operations: its gradient is complete only
# after both paths
DIAMOND = (
    "u + u.tanh().exp() where u = a * b",
    lambda a, b: (lambda u: u + u.tanh().exp())(a * b),
    (0.6, -0.9),
)

OPERATIONS = {  # for random expressions: each takes one or two earlier nodes
    "{} + {}": lambda a, b: a + b,
    "{} - {}": lambda a, b: a - b,
    "{} * {}": lambda a, b: a * b,
    "{0} / ({1} * {1} + 1)": lambda a, b: a / (b * b + 1.0),  # a denominator that is never 0
    "{}.tanh()": lambda a: a.tanh(),
    "{}.exp()": lambda a: a.exp(),
    "{} ** 2": lambda a: a**2,
    "-{}": lambda a: -a,
}


def random_expression(rng, operations=7):
    """(output, program, f): a random program on the inputs a, b and c, each step a new node (d, e,
    ...) made from earlier nodes picked at random, so that nodes are shared and reached by paths of
    different lengths; f computes the output, the last node."""
    names, steps = ["a", "b", "c"], []
    for _ in range(operations):
        template = rng.choice(sorted(OPERATIONS))
        picked = [
            rng.randrange(len(names)) for _ in range(OPERATIONS[template].__code__.co_argcount)
        ]
        steps.append((template, picked))
        names.append(chr(ord("a") + len(names)))

    def f(*xs):
        nodes = list(xs)
        for template, picked in steps:
            nodes.append(OPERATIONS[template](*(nodes[i] for i in picked)))
        return nodes[-1]

    program = "; ".join(
        f"{names[3 + k]} = {template.format(*(names[i] for i in picked))}"
        for k, (template, picked) in enumerate(steps)
    )
    return names[-1], program, f


def tame_expressions(count, seed=0):
    """`count` random expressions whose value and gradients stay moderate (below 50) at their
    inputs, so that float64 rounding cannot hide a real difference: (output, program, f, inputs)."""
    rng, found = random.Random(seed), []
    while len(found) < count:
        output, program, f = random_expression(rng)
        xs = tuple(round(rng.uniform(-1.5, 1.5), 2) for _ in range(3))
        value, grads = on_torch(f, xs)
        if all(math.isfinite(v) and abs(v) < 50 for v in (value, *grads)):
            found.append((output, program, f, xs))
    return found


@check(
    "autograd",
    "micrograd.Value(data)",
    "Value.data",
    "Value.grad",
    "Value.backward()",
    "+ - * / ** (by a number) with Values and numbers, on either side",
    "Value.exp()",
    "Value.tanh()",
)
def autograd(tree):
    """`micrograd.Value` holds a Python float (`data`) and computes +, -, *, /, ** (by a number),
    exp() and tanh(), with plain numbers on either side; after `out.backward()`, every Value's
    `grad` is d(out)/d(that Value), equal to torch.autograd's float64 gradients: for each
    operation alone, along a chain, for a Value used twice (its gradients add up), for a Value
    reached by two paths of different lengths (backward goes in reverse topological order), and
    for random expressions."""
    Value = tree.name("part0.micrograd", "Value")
    with tree.expecting("Value(1.5)", "a Value"):
        leaf = Value(1.5)
    expect(leaf.data == 1.5, "Value(1.5).data", 1.5, repr(leaf.data))
    expect(leaf.grad == 0, "Value(1.5).grad before any backward()", 0, repr(leaf.grad))
    out = Value(0.7) + Value(-1.3)
    with tree.expecting("(Value(0.7) + Value(-1.3)).backward()", "a backward pass"):
        out.backward()
    expect(
        out.grad == 1,
        "out.grad after out.backward()",
        "1, d(out)/d(out), where the chain rule starts",
        out.grad,
    )

    for text, f, xs in PRIMITIVES:
        same_as_torch(tree, Value, text, f, xs)
    text, f, xs = CHAIN  # each step is right on its own: what is left is the order they run in
    why = (
        ": the gradient must flow from the output back through every step "
        "(reverse topological order)"
    )
    same_as_torch(tree, Value, text, f, xs, why)
    for text, f, xs in COMPOSED:
        same_as_torch(tree, Value, text, f, xs)
    for text, f, xs in USED_TWICE:
        why = (
            ": a Value used twice must add up the gradient of each use (grad +=), "
            "not keep only the last one"
        )
        same_as_torch(tree, Value, text, f, xs, why)
    text, f, xs = DIAMOND
    why = (
        ": the order is wrong; backward must reach a Value only after every Value that uses it "
        "has passed its gradient back (reverse topological order)"
    )
    same_as_torch(tree, Value, text, f, xs, why)
    for output, program, f, xs in tame_expressions(12):
        same_as_torch(tree, Value, output, f, xs, context=f" where {program}")


# --------------------------------------------------------------------------------------------------
# micrograd: the MLP and its training


def mlp_by_torch(params, sizes, x):
    """An MLP of the given layer sizes computed with torch float64 from a flat list of
    parameter values, in the order parameters() lists them (layer by layer, neuron by neuron,
    each neuron's weights then its bias): tanh in every layer but the last. Returns (leaf
    parameter tensors, outputs)."""
    import torch

    leaves = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
    h, at = [torch.tensor(v, dtype=torch.float64) for v in x], 0
    for layer, (nin, nout) in enumerate(zip(sizes, sizes[1:])):
        out = []
        for _ in range(nout):
            w, b = leaves[at : at + nin], leaves[at + nin]
            at += nin + 1
            act = sum((wi * hi for wi, hi in zip(w, h)), b)
            out.append(act.tanh() if layer < len(sizes) - 2 else act)
        h = out
    return leaves, h


def outputs(out):
    """An MLP's output as a list: a list of Values, or the Value itself where the last layer
    has one neuron."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


def watched_training(tree, argv):
    """`python micrograd.py argv` run as micrograd.main(argv), watching every backward(): (what it
    printed, the number of backward() calls that found some parameter's grad not reset to 0, and how
    many such grads the worst held)."""
    micrograd = tree.module("part0.micrograd")
    MLP, Value = micrograd.MLP, micrograd.Value
    models, stale = [], []
    made, backward = MLP.__init__, Value.backward

    def recording_init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        models.append(self)

    def checking_backward(self, *args, **kwargs):
        left = sum(1 for model in models for p in model.parameters() if p.grad != 0)
        if left:
            stale.append(left)
        return backward(self, *args, **kwargs)

    MLP.__init__, Value.backward = recording_init, checking_backward
    try:
        done = tree.main(argv, module="part0.micrograd")
    finally:
        MLP.__init__, Value.backward = made, backward
    expect(
        models, f"`{tree.command(argv, 'part0.micrograd')}`", "it to train an MLP", "no MLP made"
    )
    return done.stdout, stale


@check(
    "mlp-by-hand",
    "micrograd.MLP(nin, nouts)",
    "MLP.__call__(x)",
    "MLP.parameters()",
    "micrograd.main(argv)",
    "python part0/micrograd.py --steps N",
)
def mlp_by_hand(tree):
    """`MLP(nin, nouts)` is layers of neurons, each computing tanh(w·x + b) (the last layer without
    the tanh), and `parameters()` lists each weight and bias once, layer by layer, neuron by neuron,
    each neuron's weights then its
    bias: its output and its gradients equal torch's for the same numbers, and a step of gradient
    descent lowers the loss. `micrograd.py --steps N` trains one, resetting every gradient to 0
    before each backward(), and prints a loss that falls."""
    MLP = tree.name("part0.micrograd", "MLP")
    sizes, x = [3, 4, 5, 2], [0.3, -0.8, 1.1]
    call = "MLP(3, [4, 5, 2])"
    with tree.expecting(call, "an MLP"):
        model = MLP(3, [4, 5, 2])
    params = model.parameters()
    counted = sum(nin * nout + nout for nin, nout in zip(sizes, sizes[1:]))  # 16 + 25 + 12
    expect(
        len(params) == counted and len({id(p) for p in params}) == counted,
        f"{call}.parameters()",
        f"{counted} distinct Values (nin·nout weights + nout biases per layer: 16 + 25 + 12)",
        f"{len(params)} ({len({id(p) for p in params})} distinct)",
    )
    rng = random.Random(0)
    for p in params:
        # numbers of our own, so the hand computation knows every one of them
        p.data = rng.gauss(0, 0.7)
    leaves, expected = mlp_by_torch([p.data for p in params], sizes, x)
    with tree.expecting(f"{call}({x})", "its outputs"):
        found = outputs(model(x))
    expect(len(found) == 2, f"{call}({x})", "2 outputs", len(found))
    order = (
        " (tanh in every layer but the last; parameters() layer by layer, neuron by neuron, "
        "weights then bias)"
    )
    for k, (e, v) in enumerate(zip(expected, found)):
        expect_close(f"{call}({x}) output {k}{order}", e.item(), v.data, rel=1e-9, abs_=1e-12)

    loss = (found[0] - 1.0) ** 2 + found[1] ** 2
    with tree.expecting(f"backward() through {call}", "gradients"):
        loss.backward()
    ((expected[0] - 1.0) ** 2 + expected[1] ** 2).backward()
    for k, (p, leaf) in enumerate(zip(params, leaves)):
        expect_close(
            f"the gradient of {call}'s parameter {k}",
            leaf.grad.item(),
            p.grad,
            rel=1e-9,
            abs_=1e-12,
        )
    for p in params:
        p.data -= 0.05 * p.grad
    after = outputs(model(x))
    lowered = ((after[0] - 1.0) ** 2 + after[1] ** 2).data
    expect(
        lowered < loss.data,
        "the loss after one step of gradient descent",
        f"below {loss.data:.6f}",
        lowered,
    )

    argv = ["--steps", "8"]
    shown = f"`{tree.command(argv, 'part0.micrograd')}`"
    text, stale = watched_training(tree, argv)
    expect(
        not stale,
        f"{shown}: the parameters' grads at each backward()",
        "all reset to 0 first (backward() adds into .grad)",
        f"{max(stale, default=0)} grads holding earlier steps' gradients, "
        f"at {len(stale)} of the backward() calls",
    )
    losses = [printed(lines[0], "loss") for _, lines in sorted(step_lines(text).items())]
    losses = [loss for loss in losses if loss is not None]
    expect(
        len(losses) == 8,
        f"{shown}'s printed losses",
        "one 'step N | loss L' line per step (8)",
        len(losses),
    )
    expect(
        losses[-1] < losses[0],
        f"{shown}: the loss at the last step",
        f"below the first, {losses[0]}",
        losses[-1],
    )


# --------------------------------------------------------------------------------------------------
# part0/backprop.py: forward and backward functions on tensors, against torch.autograd


def shape(t):
    return tuple(t.shape)


def compare(what, expected, found, against="torch.autograd", hints=()):
    """Fail unless `found` is a tensor of expected's shape equal to it within float64 rounding;
    `hints` are (test, words): the words are added where test(found) holds, to say what the
    mistake looks like."""
    import torch

    expect(
        torch.is_tensor(found), what, f"a tensor of shape {shape(expected)}", type(found).__name__
    )
    hint = next((f" ({words})" for test, words in hints if test(found)), "")
    expect(
        shape(found) == shape(expected),
        f"the shape of {what}",
        shape(expected),
        f"{shape(found)}{hint}",
    )
    worst = (found.double() - expected).abs().max().item() if found.numel() else 0.0
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    if not worst <= 1e-9 * scale:  # NaN fails too
        raise CheckFailed(f"{what}: off by {worst:.2g} against {against}{hint}")


def close_to(expected):
    """A hint's test: found equals `expected` (a tensor) within float64 rounding."""
    import torch

    return lambda found: (
        shape(found) == shape(expected) and torch.allclose(found.double(), expected, atol=1e-9)
    )


def by_autograd(function, inputs, dout=None):
    """torch.autograd's output of function(*inputs) and each input's gradient, the output's
    gradient being dout."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = function(*leaves)
    out.backward(dout)
    return out.detach(), [leaf.grad for leaf in leaves]


def randn(gen, *size):
    import torch

    return torch.randn(*size, generator=gen, dtype=torch.float64)


def check_cross_entropy(tree, gen, B, T, V, scale=1.0):
    import torch
    import torch.nn.functional as F

    forward = tree.name("part0.backprop", "cross_entropy_forward")
    backward = tree.name("part0.backprop", "cross_entropy_backward")
    logits, targets = scale * randn(gen, B, T, V), torch.randint(V, (B, T), generator=gen)
    where = f" for logits of {(B, T, V)}" + (f" near {scale:g}" if scale != 1 else "")
    with tree.expecting(f"cross_entropy_forward(logits, targets){where}", "(loss, cache)"):
        loss, cache = forward(logits, targets)
    expected, (dlogits,) = by_autograd(
        lambda z: F.cross_entropy(z.view(-1, V), targets.view(-1)), [logits]
    )
    stable = " (subtract each row's largest logit before exp())" if scale != 1 else ""
    compare(f"cross_entropy_forward's loss{where}{stable}", expected, loss, "F.cross_entropy")
    with tree.expecting(f"cross_entropy_backward(1.0, cache){where}", "dlogits"):
        found = backward(1.0, cache)
    N = B * T
    hints = [
        (
            close_to(dlogits * N),
            f"not divided by the N = B*T = {N} positions the loss averages over?",
        ),
        (lambda f: shape(f) == (N, V), "dlogits has the logits' shape, (B, T, V)"),
    ]
    compare(f"cross_entropy_backward's dlogits{where}", dlogits, found, hints=hints)


def check_linear(tree, gen, x_shape, n_out, bias=True):
    import torch.nn.functional as F

    forward, backward = (
        tree.name("part0.backprop", "linear_forward"),
        tree.name("part0.backprop", "linear_backward"),
    )
    x, weight = randn(gen, *x_shape), randn(gen, n_out, x_shape[-1])
    b = randn(gen, n_out) if bias else None
    # dout stands for the gradient arriving from the layers above
    dout = randn(gen, *x_shape[:-1], n_out)
    where = f" (x {x_shape}, weight {shape(weight)}, bias {f'({n_out},)' if bias else None})"
    with tree.expecting(f"linear_forward(x, weight, bias){where}", "(out, cache)"):
        out, cache = forward(x, weight, b)
    expected, grads = by_autograd(F.linear, [x, weight] + ([b] if bias else []), dout)
    compare(f"linear_forward's out{where}", expected, out, "F.linear")
    with tree.expecting(f"linear_backward(dout, cache){where}", "(dx, dweight, dbias)"):
        dx, dweight, dbias = backward(dout, cache)
    compare(f"linear_backward's dx{where}", grads[0], dx)
    transposed = [(close_to(grads[1].T), "transposed? nn.Linear's weight is (out, in)")]
    compare(f"linear_backward's dweight{where}", grads[1], dweight, hints=transposed)
    if bias:
        every = [
            (
                lambda f: f.dim() > 1,
                "summed over the batch only? every position of every row used the bias",
            )
        ]
        compare(f"linear_backward's dbias{where}", grads[2], dbias, hints=every)
    else:
        expect(
            dbias is None,
            f"linear_backward's dbias{where}",
            "None (there is no bias)",
            type(dbias).__name__,
        )


@check(
    "tensor-backprop",
    "backprop.cross_entropy_forward(logits, targets) -> (loss, cache)",
    "backprop.cross_entropy_backward(dloss, cache) -> dlogits",
    "backprop.linear_forward(x, weight, bias) -> (out, cache)",
    "backprop.linear_backward(dout, cache) -> (dx, dweight, dbias)",
)
def tensor_backprop(tree):
    """`cross_entropy_forward(logits, targets)` computes F.cross_entropy's loss over (B, T, V)
    logits, the mean over all B*T positions, even for logits in the thousands, and
    `linear_forward(x, weight, bias)` nn.Linear's x @ weight.T + bias (bias may be None). Their
    `*_backward(dout, cache)` functions return exactly the gradients torch.autograd finds for the
    same inputs, whatever B, T and the widths are."""
    import torch

    gen = torch.Generator().manual_seed(0)
    for B, T, V in ((3, 7, 11), (2, 5, 13), (1, 1, 4)):
        check_cross_entropy(tree, gen, B, T, V)
    check_cross_entropy(tree, gen, 2, 3, 5, scale=1000.0)
    for x_shape, n_out in (((3, 7, 10), 6), ((2, 5, 4), 9), ((5, 3), 8)):
        check_linear(tree, gen, x_shape, n_out)
    check_linear(tree, gen, (2, 3, 6), 5, bias=False)


# --------------------------------------------------------------------------------------------------
# part0/backprop.py: LayerNorm, GELU, the MLP and a tiny model


def exact_gelu_grad(x):
    """d/dx of the exact GELU, x·Φ(x): Φ(x) + x·φ(x)."""
    import torch

    return 0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x**2) / math.sqrt(
        2 * math.pi
    )


def check_layernorm(tree, gen, B, T, C):
    import torch.nn.functional as F

    forward, backward = (
        tree.name("part0.backprop", "layernorm_forward"),
        tree.name("part0.backprop", "layernorm_backward"),
    )
    # x far from mean 0 and variance 1
    x, weight, bias = 2 + 3 * randn(gen, B, T, C), randn(gen, C), randn(gen, C)
    where = f" (x {(B, T, C)})"
    with tree.expecting(f"layernorm_forward(x, weight, bias){where}", "(out, cache)"):
        out, cache = forward(x, weight, bias)
    dout = randn(gen, B, T, C)
    expected, grads = by_autograd(
        lambda *t: F.layer_norm(t[0], (C,), t[1], t[2]), [x, weight, bias], dout
    )
    compare(
        f"layernorm_forward's out{where}",
        expected,
        out,
        "F.layer_norm (eps 1e-5, the biased variance)",
    )
    with tree.expecting(f"layernorm_backward(dout, cache){where}", "(dx, dweight, dbias)"):
        dx, dweight, dbias = backward(dout, cache)
    rstd = (x.var(dim=-1, keepdim=True, correction=0) + 1e-5) ** -0.5
    missing = [
        (
            close_to(dout * weight * rstd),
            "the mean and the variance depend on x too: their terms are missing",
        )
    ]
    compare(f"layernorm_backward's dx{where}", grads[0], dx, hints=missing)
    compare(f"layernorm_backward's dweight{where}", grads[1], dweight)
    compare(f"layernorm_backward's dbias{where}", grads[2], dbias)


def check_gelu(tree, gen, size):
    import torch.nn.functional as F

    forward, backward = (
        tree.name("part0.backprop", "gelu_forward"),
        tree.name("part0.backprop", "gelu_backward"),
    )
    x = 2 * randn(gen, *size)
    with tree.expecting(f"gelu_forward(x) (x {size})", "(out, cache)"):
        out, cache = forward(x)
    dout = randn(gen, *size)
    expected, (dx,) = by_autograd(lambda t: F.gelu(t, approximate="tanh"), [x], dout)
    exact = [(close_to(F.gelu(x)), "that is the exact erf GELU; GPT-2's is the tanh approximation")]
    compare(
        f"gelu_forward's out (x {size})", expected, out, "F.gelu(approximate='tanh')", hints=exact
    )
    with tree.expecting(f"gelu_backward(dout, cache) (x {size})", "dx"):
        found = backward(dout, cache)
    exact = [
        (
            close_to(dout * exact_gelu_grad(x)),
            "the exact erf GELU's derivative; GPT-2's GELU is the tanh one",
        )
    ]
    compare(f"gelu_backward's dx (x {size})", dx, found, hints=exact)


MLP_NAMES = ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")


def mlp_params(gen, C, prefix=""):
    return dict(
        zip(
            (prefix + name for name in MLP_NAMES),
            (
                randn(gen, 4 * C, C) / C**0.5,
                randn(gen, 4 * C),
                randn(gen, C, 4 * C) / (4 * C) ** 0.5,
                randn(gen, C),
            ),
        )
    )


def torch_mlp(x, p, prefix=""):
    import torch.nn.functional as F

    h = F.gelu(F.linear(x, p[prefix + "c_fc.weight"], p[prefix + "c_fc.bias"]), approximate="tanh")
    return F.linear(h, p[prefix + "c_proj.weight"], p[prefix + "c_proj.bias"])


def torch_model(x, targets, p, residual=True, through_mlp=True):
    """x + mlp(ln_2(x)), ln_f, lm_head (no bias), the mean cross-entropy; `residual` or
    `through_mlp` False stops the gradient on that path of x (for a hint)."""
    import torch.nn.functional as F

    C = x.size(-1)
    h = F.layer_norm(x if through_mlp else x.detach(), (C,), p["ln_2.weight"], p["ln_2.bias"])
    x = (x if residual else x.detach()) + torch_mlp(h, p, "mlp.")
    logits = F.linear(F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"]), p["lm_head.weight"])
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def by_autograd_named(function, x, params, dout=None):
    """by_autograd for function(x, params), params a dict: (output, dx, {name: gradient})."""
    names = list(params)
    out, grads = by_autograd(
        lambda x, *ps: function(x, dict(zip(names, ps))), [x, *params.values()], dout
    )
    return out, grads[0], dict(zip(names, grads[1:]))


def compare_named(what, expected, found):
    expect(
        isinstance(found, dict),
        what,
        f"a dict of {len(expected)} gradients by name",
        type(found).__name__,
    )
    missing = [name for name in expected if name not in found]
    expect(
        not missing,
        what,
        f"a gradient for each of {', '.join(expected)}",
        f"none for {', '.join(missing)}",
    )
    for name, grad in expected.items():
        compare(f"{what}[{name!r}]", grad, found[name])


def check_mlp(tree, gen, B, T, C):
    forward, backward = (
        tree.name("part0.backprop", "mlp_forward"),
        tree.name("part0.backprop", "mlp_backward"),
    )
    x, params = randn(gen, B, T, C), mlp_params(gen, C)
    where = f" (x {(B, T, C)})"
    with tree.expecting(f"mlp_forward(x, params){where}", "(out, cache)"):
        out, cache = forward(x, params)
    dout = randn(gen, B, T, C)
    expected, dx, grads = by_autograd_named(torch_mlp, x, params, dout)
    compare(f"mlp_forward's out{where}", expected, out, "c_fc, GELU (tanh), c_proj by torch")
    with tree.expecting(f"mlp_backward(dout, cache){where}", "(dx, grads)"):
        found_dx, found = backward(dout, cache)
    compare(f"mlp_backward's dx{where}", dx, found_dx)
    compare_named(f"mlp_backward's grads{where}", grads, found)


def check_model(tree, gen, B, T, C, V):
    import torch

    forward, backward = (
        tree.name("part0.backprop", "model_forward"),
        tree.name("part0.backprop", "model_backward"),
    )
    x, targets = randn(gen, B, T, C), torch.randint(V, (B, T), generator=gen)
    params = {
        "ln_2.weight": 1 + 0.3 * randn(gen, C),
        "ln_2.bias": randn(gen, C),
        **mlp_params(gen, C, "mlp."),
    }
    params.update({"ln_f.weight": 1 + 0.3 * randn(gen, C), "ln_f.bias": randn(gen, C)})
    params["lm_head.weight"] = randn(gen, V, C) / C**0.5
    where = f" (x {(B, T, C)}, {V} logits)"
    with tree.expecting(f"model_forward(x, targets, params){where}", "(loss, cache)"):
        loss, cache = forward(x, targets, params)
    expected, dx, grads = by_autograd_named(lambda x, p: torch_model(x, targets, p), x, params)
    compare(f"model_forward's loss{where}", expected, loss, "the same model in torch")
    with tree.expecting(f"model_backward(1.0, cache){where}", "(dx, grads)"):
        found_dx, found = backward(1.0, cache)
    only_residual = by_autograd_named(
        lambda x, p: torch_model(x, targets, p, through_mlp=False), x, params
    )[1]
    only_mlp = by_autograd_named(
        lambda x, p: torch_model(x, targets, p, residual=False), x, params
    )[1]
    one_path = [
        (
            close_to(only_residual),
            "only the residual path: x also feeds ln_2, and the two gradients add up",
        ),
        (
            close_to(only_mlp),
            "only the path through ln_2: x also feeds the residual sum, and the two add up",
        ),
    ]
    compare(f"model_backward's dx{where}", dx, found_dx, hints=one_path)
    compare_named(f"model_backward's grads{where}", grads, found)


@check(
    "layernorm-gelu",
    "backprop.layernorm_forward(x, weight, bias) -> (out, cache)",
    "backprop.layernorm_backward(dout, cache) -> (dx, dweight, dbias)",
    "backprop.gelu_forward(x) -> (out, cache)",
    "backprop.gelu_backward(dout, cache) -> dx",
    "backprop.mlp_forward(x, params) -> (out, cache)",
    "backprop.mlp_backward(dout, cache) -> (dx, grads)",
    "backprop.model_forward(x, targets, params) -> (loss, cache)",
    "backprop.model_backward(dloss, cache) -> (dx, grads)",
)
def layernorm_gelu(tree):
    """`layernorm_forward` computes nn.LayerNorm over the last dimension (eps 1e-5), `gelu_forward`
    GPT-2's tanh GELU, `mlp_forward(x, params)` GPT-2's MLP (c_fc, GELU, c_proj, params named as in
    the checkpoint) and `model_forward(x, targets, params)` x + mlp(ln_2(x)) followed by ln_f,
    lm_head and the loss; each `*_backward` returns exactly torch.autograd's gradients for the same
    inputs, of every input and every parameter."""
    import torch

    gen = torch.Generator().manual_seed(0)
    for B, T, C in ((3, 7, 10), (2, 5, 6)):
        check_layernorm(tree, gen, B, T, C)
    for size in ((3, 7, 10), (4, 9)):
        check_gelu(tree, gen, size)
    check_mlp(tree, gen, 3, 7, 6)
    check_model(tree, gen, 3, 7, 6, 11)
