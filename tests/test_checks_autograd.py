"""Part 0's checks on a learner's tree: correct code written differently from ours passes, and
plausible mistakes fail with one readable line that names the rule they break. Each scenario checks
out a step of the built series, edits one file the way a learner might, and runs the check as
`walkthrough exercise N --check` does (a process in the tree); test_exercises.py runs every check at
its own step and the one before."""

import time
from pathlib import Path

import pytest

from check_tags import edited
from walkthrough import checks

# steps 1 to 4, one check each
SLUGS = ["autograd", "mlp-by-hand", "tensor-backprop", "layernorm-gelu"]
STEP_OF = dict(zip(["p1", "p2", "p3", "p4"], SLUGS))  # the scenarios' trees: Part 0's steps

# ---- learners' changes: (file, old, new), `old` standing in the file exactly once

# our code, which the scenarios below replace: the topological order's search, and backward()'s body
REFERENCE_ORDER = """        def visit(v):
            if v not in seen:
                seen.add(v)
                for source, _ in v._inputs:
                    visit(source)
                order.append(v)

        visit(self)
"""
REFERENCE_BACKWARD = """        self.grad = 1.0  # d(self)/d(self)
        for v in reversed(self.topological_order()):
            for source, local in v._inputs:
                source.grad += local * v.grad  # the chain rule; += sums the shares of every use
"""
OVERWRITE = ("part0/micrograd.py", "source.grad += local * v.grad", "source.grad = local * v.grad")
TANH_1_MINUS_T = ("part0/micrograd.py", "((self, 1 - t**2),)", "((self, 1 - t),)")
NOT_REVERSED = (
    "part0/micrograd.py",
    "in reversed(self.topological_order()):",
    "in self.topological_order():",
)
BREADTH_FIRST = (
    "part0/micrograd.py",
    REFERENCE_ORDER,
    """        queue = [self]  # breadth first from the output: nearest Values first
        while queue:
            v = queue.pop(0)
            if v not in seen:
                seen.add(v)
                order.insert(0, v)  # walked backwards below, so the output comes first
                queue.extend(source for source, _ in v._inputs)
""",
)
PUSH_RECURSIVELY = (  # no order at all: each Value passes its gradient on as soon as it gets some
    "part0/micrograd.py",
    REFERENCE_BACKWARD,
    """        self.grad = 1.0
        self._push()

    def _push(self):
        for source, local in self._inputs:
            source.grad += local * self.grad
            source._push()
""",
)
# correct, written differently: Kahn's algorithm, counting each Value's uses instead of
# a depth-first search
KAHN = (
    "part0/micrograd.py",
    REFERENCE_BACKWARD,
    """        uses, stack, seen = {}, [self], {self}
        while stack:
            for source, _ in stack.pop()._inputs:
                uses[source] = uses.get(source, 0) + 1
                if source not in seen:
                    seen.add(source)
                    stack.append(source)
        self.grad = 1.0
        ready = [self]
        while ready:
            v = ready.pop()
            for source, local in v._inputs:
                source.grad += local * v.grad
                uses[source] -= 1
                if uses[source] == 0:
                    ready.append(source)
""",
)
NO_ZERO_GRAD = ("part0/micrograd.py", "p.grad = 0.0  #", "pass  #")
TANH_IN_LAST_LAYER = ("part0/micrograd.py", "rng, nonlin=i < last)", "rng)")
BIAS_NOT_LISTED = ("part0/micrograd.py", "return self.w + [self.b]", "return self.w")
CE_NOT_DIVIDED = (
    "part0/backprop.py",
    "return (dlogits * (dloss / N)).view(shape)",
    "return (dlogits * dloss).view(shape)",
)
CE_NOT_SHIFTED = (
    "part0/backprop.py",
    "shifted = logits - logits.max(dim=1, keepdim=True).values  # (N, V)",
    "shifted = logits  # (N, V)",
)
CE_LOGSUMEXP = (  # correct, written differently
    "part0/backprop.py",
    "    logprobs = shifted - shifted.exp().sum(dim=1, keepdim=True).log()"
    "  # (N, V): log softmax\n",
    "    logprobs = logits - torch.logsumexp(logits, dim=1, keepdim=True)\n",
)
DWEIGHT_TRANSPOSED = ("part0/backprop.py", "dweight = dout2.T @ x2", "dweight = x2.T @ dout2")
DBIAS_OVER_BATCH = (
    "part0/backprop.py",
    "dbias = dout2.sum(dim=0) if has_bias",
    "dbias = dout.sum(dim=0) if has_bias",
)
DWEIGHT_EINSUM = (
    "part0/backprop.py",
    "dweight = dout2.T @ x2",
    'dweight = torch.einsum("...o,...i->oi", dout, x)',
)
# our dx, whose lines the two scenarios below replace
LN_DX = """    dx = rstd * (
        dxhat - dxhat.mean(dim=-1, keepdim=True) - xhat * (dxhat * xhat).mean(dim=-1, keepdim=True)
    )
"""
LN_NO_MEAN_TERMS = ("part0/backprop.py", LN_DX, "    dx = rstd * dxhat\n")
LN_TEXTBOOK = (  # correct, written differently: through the variance and the mean, one at a time
    "part0/backprop.py",
    LN_DX,
    """    xmu = xhat / rstd
    dvar = (dxhat * xmu).sum(dim=-1, keepdim=True) * -0.5 * rstd**3
    dmean = -(dxhat * rstd).sum(dim=-1, keepdim=True) - 2 * dvar * xmu.mean(dim=-1, keepdim=True)
    dx = dxhat * rstd + dvar * 2 * xmu / C + dmean / C
""",
)
GELU_EXACT_DERIVATIVE = (
    "part0/backprop.py",
    "    return dout * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * dinner)\n",
    "    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))\n"
    "    return dout * (cdf + x * torch.exp(-0.5 * x**2) / math.sqrt(2 * math.pi))\n",
)
RESIDUAL_PATH_ONLY = ("part0/backprop.py", "return dx + dx_through_mlp, grads", "return dx, grads")

# name: (the step's tree, the checks to run, the learner's changes, None if they must pass, else
# words it fails with)
SCENARIOS = {
    "a gradient overwritten, not accumulated": (
        "p1",
        ["autograd"],
        [OVERWRITE],
        "d(a + a)/da at a=1.5: expected 2",
    ),
    "tanh's derivative 1 - t": ("p1", ["autograd"], [TANH_1_MINUS_T], "d(a.tanh())/da at a=0.7"),
    "the topological order not reversed": (
        "p1",
        ["autograd"],
        [NOT_REVERSED],
        "reverse topological order",
    ),
    "a breadth-first order": ("p1", ["autograd"], [BREADTH_FIRST], "the order is wrong"),
    "pushing gradients recursively, in no order": (
        "p1",
        ["autograd"],
        [PUSH_RECURSIVELY],
        "the order is wrong",
    ),
    "Kahn's algorithm instead of a depth-first search": ("p1", ["autograd"], [KAHN], None),
    "a training loop that never resets the gradients": (
        "p2",
        ["mlp-by-hand"],
        [NO_ZERO_GRAD],
        "`python part0/micrograd.py --steps 8`: the parameters' grads at each backward(): "
        "expected all reset to 0",
    ),
    "tanh in the last layer too": (
        "p2",
        ["mlp-by-hand"],
        [TANH_IN_LAST_LAYER],
        "output 0 (tanh in every layer but",
    ),
    "a neuron that does not list its bias": (
        "p2",
        ["mlp-by-hand"],
        [BIAS_NOT_LISTED],
        "expected 53 distinct Values",
    ),
    "cross-entropy's gradient not divided by N": (
        "p3",
        ["tensor-backprop"],
        [CE_NOT_DIVIDED],
        "not divided by the N = B*T = 21 positions",
    ),
    "softmax without subtracting the max": (
        "p3",
        ["tensor-backprop"],
        [CE_NOT_SHIFTED],
        "largest logit",
    ),
    "log softmax by torch.logsumexp": ("p3", ["tensor-backprop"], [CE_LOGSUMEXP], None),
    "dweight transposed": (
        "p3",
        ["tensor-backprop"],
        [DWEIGHT_TRANSPOSED],
        "expected (6, 10), found (10, 6) (transposed?",
    ),
    "dbias summed over the batch only": (
        "p3",
        ["tensor-backprop"],
        [DBIAS_OVER_BATCH],
        "summed over the batch only",
    ),
    "dweight by einsum": ("p3", ["tensor-backprop"], [DWEIGHT_EINSUM], None),
    "LayerNorm's backward without the mean terms": (
        "p4",
        ["layernorm-gelu"],
        [LN_NO_MEAN_TERMS],
        "layernorm_backward's dx (x (3, 7, 10)): off by",
    ),
    "LayerNorm's backward through dvar and dmean": ("p4", ["layernorm-gelu"], [LN_TEXTBOOK], None),
    "the exact GELU's derivative": (
        "p4",
        ["layernorm-gelu"],
        [GELU_EXACT_DERIVATIVE],
        "the exact erf GELU's derivative",
    ),
    "the residual path only": (
        "p4",
        ["layernorm-gelu"],
        [RESIDUAL_PATH_ONLY],
        "model_backward's dx",
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_learners_tree(series_history, tmp_path, scenario):
    step, slugs, changes, fails_with = SCENARIOS[scenario]
    ((file, old, new),) = changes
    results = checks.run(
        edited(series_history, STEP_OF[step], tmp_path / "tree", (old, new), file=file), slugs
    )
    assert all("\n" not in r.message for r in results), "a verdict is one line"
    if fails_with is None:
        assert [(r.slug, r.message) for r in results if not r.ok] == []
    else:
        (result,) = results
        assert not result.ok, f"{scenario}: the {result.slug} check passed"
        assert fails_with in result.message, result.message


def test_every_step_has_its_check():
    assert [slug for slug in checks.CHECKS if slug in SLUGS] == SLUGS
    for slug in SLUGS:
        assert checks.CHECKS[slug].proves, f"{slug}: a check says what passing proves"


def sleeping(marker):
    """The processes running `sleep marker`, from /proc."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                found.append(cmdline.parent.name)
        except OSError:  # gone while we looked
            pass
    return found


# what the learner's code does after starting a sleep: carry on (the check passes), exit (it fails),
# never return (it times out: a hang, which burns no core the other tests need)
THEN = {
    "passes": "",
    "fails": "raise SystemExit(3)\n",
    "times out": "import time; time.sleep(3600)\n",
}


@pytest.mark.parametrize("then", list(THEN))
def test_a_check_ends_every_process_the_learners_code_started(series_history, tmp_path, then):
    marker = f"{time.time_ns() % 10**9}.5"  # seconds: a sleep of its own, found by its argument
    start = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\n" + THEN[then]
    tree = edited(
        series_history,
        "autograd",
        tmp_path / "tree",
        ("import math\n", start + "import math\n"),
        file="part0/micrograd.py",
    )
    (result,) = checks.run(tree, ["autograd"], timeout=3 if then == "times out" else 300)
    assert result.ok == (then == "passes"), result.message
    if then == "times out":
        assert result.message == "the checks were still running after 3 s"
    # SIGKILL is sent, not yet acted on: a bound for a process left running, no timing
    gone = time.monotonic() + 30
    while sleeping(marker) and time.monotonic() < gone:
        time.sleep(0.1)
    assert sleeping(marker) == []
