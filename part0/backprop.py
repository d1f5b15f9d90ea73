"""Backpropagation by hand through GPT-2's pieces, on tensors. Each piece is a pair of functions:
`*_forward` returns its output and a cache (what the backward pass will need), and `*_backward`
takes the gradient of the loss with respect to that output, and the cache, and returns the gradients
with respect to the inputs. torch.autograd computes none of our gradients; it only checks them."""

import argparse
import math
import sys

import torch
import torch.nn.functional as F

# ---- the loss


def cross_entropy_forward(logits, targets):
    # logits (B, T, V), targets (B, T): the mean over the N = B*T positions of -log
    # softmax(logits)[target]
    shape, V = logits.shape, logits.size(-1)
    logits, targets = logits.reshape(-1, V), targets.reshape(-1)  # (N, V), (N,)
    # subtracting each row's largest logit changes no probability, and exp() can no longer overflow
    shifted = logits - logits.max(dim=1, keepdim=True).values  # (N, V)
    logprobs = shifted - shifted.exp().sum(dim=1, keepdim=True).log()  # (N, V): log softmax
    loss = -logprobs[torch.arange(len(targets)), targets].mean()
    return loss, (logprobs, targets, shape)


def cross_entropy_backward(dloss, cache):
    logprobs, targets, shape = cache
    N = len(targets)
    # d(-log softmax(z)[y])/dz = softmax(z) - onehot(y): the target's logit is pushed up, every
    # other one down
    dlogits = logprobs.exp()  # (N, V): the probabilities
    dlogits[torch.arange(N), targets] -= 1
    return (dlogits * (dloss / N)).view(shape)  # the mean gives each position 1/N of the loss


# ---- the layers


def linear_forward(x, weight, bias):
    # nn.Linear's layout: weight (out, in), bias (out,) or None; x (..., in) -> (..., out)
    out = x @ weight.T
    if bias is not None:
        out = out + bias
    return out, (x, weight, bias is not None)


def linear_backward(dout, cache):
    x, weight, has_bias = cache
    dx = dout @ weight  # (..., in)
    # every position used the same weight and bias, so their gradients are sums over all positions
    dout2, x2 = dout.reshape(-1, dout.size(-1)), x.reshape(-1, x.size(-1))  # (N, out), (N, in)
    dweight = dout2.T @ x2  # (out, in), like weight
    dbias = dout2.sum(dim=0) if has_bias else None  # (out,)
    return dx, dweight, dbias


def embedding_forward(idx, weight):
    # wte's layout: weight (V, C); idx (...) of token ids -> (..., C), one row of weight per token
    return weight[idx], (idx, weight.shape)


def embedding_backward(dout, cache):
    idx, shape = cache
    # a row read at several positions gets the sum of their gradients, as a Value used twice does: a
    # scatter-add (the token ids are integers: they have no gradient) (V, C)
    return torch.zeros(shape, dtype=dout.dtype).index_add_(
        0, idx.reshape(-1), dout.reshape(-1, shape[-1])
    )


def layernorm_forward(x, weight, bias, eps=1e-5):
    # each position's C channels shifted to mean 0 and scaled to variance 1, then given a learned
    # scale and shift
    mean = x.mean(dim=-1, keepdim=True)  # (B, T, 1)
    # (B, T, 1): the biased variance, as nn.LayerNorm uses
    var = x.var(dim=-1, keepdim=True, correction=0)
    rstd = (var + eps) ** -0.5  # (B, T, 1)
    xhat = (x - mean) * rstd  # (B, T, C)
    return xhat * weight + bias, (xhat, rstd, weight)


def layernorm_backward(dout, cache):
    xhat, rstd, weight = cache
    C = xhat.size(-1)
    dweight = (dout * xhat).reshape(-1, C).sum(dim=0)  # (C,)
    dbias = dout.reshape(-1, C).sum(dim=0)  # (C,)
    dxhat = dout * weight  # (B, T, C)
    # each x_i also moves its position's mean and variance, and through them every xhat_j: the two
    # mean terms
    dx = rstd * (
        dxhat - dxhat.mean(dim=-1, keepdim=True) - xhat * (dxhat * xhat).mean(dim=-1, keepdim=True)
    )
    return dx, dweight, dbias


GELU_SCALE = math.sqrt(2 / math.pi)


def gelu_forward(x):
    # GPT-2's GELU: the tanh approximation of x·Φ(x), 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))
    t = torch.tanh(GELU_SCALE * (x + 0.044715 * x**3))
    return 0.5 * x * (1 + t), (x, t)


def gelu_backward(dout, cache):
    x, t = cache
    dinner = GELU_SCALE * (1 + 3 * 0.044715 * x**2)  # d(the tanh's argument)/dx
    # the product rule on 0.5·x·(1 + t), with dt = (1 - t²)·dinner, tanh's derivative as in
    # micrograd
    return dout * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * dinner)


def mlp_forward(x, params):
    # GPT-2's MLP, params named as in the checkpoint: c_fc widens each position to 4C, GELU, c_proj
    # brings it back
    h, c_fc = linear_forward(x, params["c_fc.weight"], params["c_fc.bias"])  # (B, T, 4C)
    a, gelu = gelu_forward(h)  # (B, T, 4C)
    out, c_proj = linear_forward(a, params["c_proj.weight"], params["c_proj.bias"])  # (B, T, C)
    return out, (c_fc, gelu, c_proj)


def mlp_backward(dout, cache):
    c_fc, gelu, c_proj = cache
    grads = {}
    # the forward's steps in reverse, each handing its input's gradient to the step before
    da, grads["c_proj.weight"], grads["c_proj.bias"] = linear_backward(dout, c_proj)
    dh = gelu_backward(da, gelu)
    dx, grads["c_fc.weight"], grads["c_fc.bias"] = linear_backward(dh, c_fc)
    return dx, grads


def submodule(params, prefix):
    # the parameters under one module ("mlp."), named as inside it ("c_fc.weight")
    return {name.removeprefix(prefix): p for name, p in params.items() if name.startswith(prefix)}


def model_forward(x, targets, params):
    # GPT-2 with no attention and one block: x (B, T, C) stands for the embeddings; the MLP half of
    # a block adds mlp(ln_2(x)) to the residual stream, then ln_f, lm_head and the loss end the
    # model as in GPT-2
    h, ln_2 = layernorm_forward(x, params["ln_2.weight"], params["ln_2.bias"])
    m, mlp = mlp_forward(h, submodule(params, "mlp."))
    x = x + m  # (B, T, C)
    h, ln_f = layernorm_forward(x, params["ln_f.weight"], params["ln_f.bias"])
    # (B, T, V); GPT-2's lm_head has no bias
    logits, lm_head = linear_forward(h, params["lm_head.weight"], None)
    loss, loss_cache = cross_entropy_forward(logits, targets)
    return loss, (ln_2, mlp, ln_f, lm_head, loss_cache)


def model_backward(dloss, cache):
    ln_2, mlp, ln_f, lm_head, loss_cache = cache
    grads = {}
    dlogits = cross_entropy_backward(dloss, loss_cache)
    dh, grads["lm_head.weight"], _ = linear_backward(dlogits, lm_head)
    dx, grads["ln_f.weight"], grads["ln_f.bias"] = layernorm_backward(dh, ln_f)
    dm, mlp_grads = mlp_backward(dx, mlp)  # x + m passes its gradient unchanged to both x and m
    grads.update({"mlp." + name: g for name, g in mlp_grads.items()})
    dx_through_mlp, grads["ln_2.weight"], grads["ln_2.bias"] = layernorm_backward(dm, ln_2)
    # x fed two paths, the residual stream and ln_2: its gradient is the sum of both, like a Value
    # used twice
    return dx + dx_through_mlp, grads


# ---- checking our gradients against torch.autograd

# small, and all different: a transposed or wrongly summed gradient gets the wrong shape
B, T, C, V = 3, 7, 12, 19


def autograd(function, inputs, dout):
    """torch.autograd's answer for function(inputs), inputs a dict of tensors by name: the output,
    and the gradient of each input when the output's gradient is dout (None for a loss:
    d(loss)/d(loss) = 1)."""
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in inputs.items()}
    out = function(leaves)
    out.backward(dout)
    return out.detach(), {name: leaf.grad for name, leaf in leaves.items()}


def compared(name, out, expected, ours, grads):
    """Rows (name, ours, torch's): the forward's output, then the gradient of every input."""
    return [(name, out, expected), *((f"{key}.grad", ours[key], grads[key]) for key in grads)]


def torch_mlp(x, params):
    h = F.gelu(F.linear(x, params["c_fc.weight"], params["c_fc.bias"]), approximate="tanh")
    return F.linear(h, params["c_proj.weight"], params["c_proj.bias"])


def torch_model(x, targets, params):
    h = F.layer_norm(x, (C,), params["ln_2.weight"], params["ln_2.bias"])
    x = x + torch_mlp(h, submodule(params, "mlp."))
    logits = F.linear(
        F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"]), params["lm_head.weight"]
    )
    return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def mlp_params(rand, prefix=""):
    # linear weights of std 1/sqrt(fan_in), so that activations stay near 1 in size and GELU is not
    # flat
    return {
        prefix + "c_fc.weight": rand(4 * C, C) / C**0.5,
        prefix + "c_fc.bias": rand(4 * C),
        prefix + "c_proj.weight": rand(C, 4 * C) / (4 * C) ** 0.5,
        prefix + "c_proj.bias": rand(C),
    }


# Each check draws its inputs with rand(*shape), normal numbers in the run's dtype, and gen, the
# generator rand draws from (for the targets); it returns the rows that main prints.


def check_cross_entropy(rand, gen):
    inputs, targets = {"logits": rand(B, T, V)}, torch.randint(V, (B, T), generator=gen)
    loss, cache = cross_entropy_forward(inputs["logits"], targets)
    ours = {"logits": cross_entropy_backward(1.0, cache)}  # d(loss)/d(loss) = 1
    expected, grads = autograd(
        lambda t: F.cross_entropy(t["logits"].view(-1, V), targets.view(-1)), inputs, None
    )
    return compared("loss", loss, expected, ours, grads)


def check_linear(rand, gen):
    inputs = {"x": rand(B, T, C), "weight": rand(4 * C, C), "bias": rand(4 * C)}
    out, cache = linear_forward(inputs["x"], inputs["weight"], inputs["bias"])
    dout = rand(*out.shape)  # stands for the gradient that arrives from the layers above
    ours = dict(zip(inputs, linear_backward(dout, cache)))
    expected, grads = autograd(lambda t: F.linear(t["x"], t["weight"], t["bias"]), inputs, dout)
    return compared("out", out, expected, ours, grads)


def check_embedding(rand, gen):
    # 21 positions, 19 token ids: some ids come more than once
    idx = torch.randint(V, (B, T), generator=gen)
    inputs = {"weight": rand(V, C)}
    out, cache = embedding_forward(idx, inputs["weight"])
    dout = rand(*out.shape)
    ours = {"weight": embedding_backward(dout, cache)}
    expected, grads = autograd(lambda t: F.embedding(idx, t["weight"]), inputs, dout)
    return compared("out", out, expected, ours, grads)


def check_layernorm(rand, gen):
    inputs = {"x": rand(B, T, C), "weight": rand(C), "bias": rand(C)}
    out, cache = layernorm_forward(inputs["x"], inputs["weight"], inputs["bias"])
    dout = rand(*out.shape)
    ours = dict(zip(inputs, layernorm_backward(dout, cache)))
    expected, grads = autograd(
        lambda t: F.layer_norm(t["x"], (C,), t["weight"], t["bias"]), inputs, dout
    )
    return compared("out", out, expected, ours, grads)


def check_gelu(rand, gen):
    inputs = {"x": rand(B, T, 4 * C)}
    out, cache = gelu_forward(inputs["x"])
    dout = rand(*out.shape)
    ours = {"x": gelu_backward(dout, cache)}
    expected, grads = autograd(lambda t: F.gelu(t["x"], approximate="tanh"), inputs, dout)
    return compared("out", out, expected, ours, grads)


def check_mlp(rand, gen):
    x, params = rand(B, T, C), mlp_params(rand)
    out, cache = mlp_forward(x, params)
    dout = rand(*out.shape)
    dx, ours = mlp_backward(dout, cache)
    expected, grads = autograd(lambda t: torch_mlp(t["x"], t), {"x": x, **params}, dout)
    return compared("out", out, expected, {"x": dx, **ours}, grads)


def check_model(rand, gen):
    x, targets = rand(B, T, C), torch.randint(V, (B, T), generator=gen)
    params = {"ln_2.weight": rand(C), "ln_2.bias": rand(C), **mlp_params(rand, "mlp.")}
    params.update(
        {"ln_f.weight": rand(C), "ln_f.bias": rand(C), "lm_head.weight": rand(V, C) / C**0.5}
    )
    loss, cache = model_forward(x, targets, params)
    dx, ours = model_backward(1.0, cache)
    expected, grads = autograd(lambda t: torch_model(t["x"], targets, t), {"x": x, **params}, None)
    return compared("loss", loss, expected, {"x": dx, **ours}, grads)


PIECES = {
    "cross_entropy": check_cross_entropy,
    "linear": check_linear,
    "embedding": check_embedding,
    "layernorm": check_layernorm,
    "gelu": check_gelu,
    "mlp": check_mlp,
    "model": check_model,
}
# far above each precision's rounding, far below any real mistake
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}


class ArgumentParser(argparse.ArgumentParser):
    # one line on stderr and exit status 1, instead of the usage text and status 2
    def error(self, message):
        sys.exit(f"{self.prog}: error: {message} (see --help)")


def parse_args(argv=None):
    p = ArgumentParser(description="Check our hand-written backward passes against torch.autograd.")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument(
        "--dtype", choices=sorted(TOLERANCE), default="float64", help="precision of every tensor"
    )
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(PIECES),
        metavar="PIECE",
        help=f"some of: {', '.join(PIECES)}",
    )
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    dtype, tolerance = getattr(torch, args.dtype), TOLERANCE[args.dtype]
    # our own generator: the same inputs on every run
    gen = torch.Generator().manual_seed(args.seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)

    print(
        f"{args.dtype}, seed {args.seed}: outputs and gradients, ours against torch.autograd's "
        "(largest difference)"
    )
    wrong = total = 0
    for piece in args.only or PIECES:
        for name, ours, theirs in PIECES[piece](rand, gen):
            same_shape = ours.shape == theirs.shape
            # a wrong shape is wrong
            diff = (ours - theirs).abs().max().item() if same_shape else math.inf
            # rounding differs from machine to machine: below a tenth of the tolerance it is shown
            # as a bound
            shown = f"<{tolerance / 10:.0e}" if diff < tolerance / 10 else f"{diff:.0e}"
            print(f"{piece:<14} {name:<22} {str(tuple(theirs.shape)):<11} {shown}")
            total, wrong = total + 1, wrong + (not diff <= tolerance)  # NaN is wrong too
    print(f"{total - wrong} of {total} within {tolerance:.0e}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
