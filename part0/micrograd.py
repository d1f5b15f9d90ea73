"""Autograd one number at a time: every `Value` remembers the Values it was computed from, with the
local derivative of each step, so that `backward()` can run the chain rule from an output back to
every input. PyTorch does the same for tensors; here each piece is small enough to read."""

import argparse
import math
import random
import sys

# ---- autograd


class Value:
    def __init__(self, data, op="", inputs=()):
        self.data = float(data)  # a Python float: float64, the precision to compare with
        # d(output)/d(self) once output.backward() has run; backward() only ever adds to it
        self.grad = 0.0
        self.op = op  # the operation that made this Value ("" for an input)
        # each input with the derivative of this Value with respect to it, taken now, while the
        # numbers are at hand
        self._inputs = inputs

    def __repr__(self):
        return f"Value({self.data:.6f}, grad={self.grad:.6f}{', op=' + self.op if self.op else ''})"

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data + other.data, "+", ((self, 1.0), (other, 1.0)))

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        # d(a·b)/da = b and d(a·b)/db = a: each factor's gradient is scaled by the other factor
        return Value(self.data * other.data, "*", ((self, other.data), (other, self.data)))

    def __pow__(self, k):
        assert isinstance(k, (int, float)), "the exponent is a plain number"
        return Value(self.data**k, f"**{k}", ((self, k * self.data ** (k - 1)),))

    def exp(self):
        e = math.exp(self.data)
        return Value(e, "exp", ((self, e),))  # exp is its own derivative

    def tanh(self):
        t = math.tanh(self.data)
        return Value(t, "tanh", ((self, 1 - t**2),))

    # everything else is made of the operations above, so its gradient needs no code of its own
    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        return self + (-other)

    def __truediv__(self, other):
        return self * other**-1

    def __radd__(self, other):  # 2 + v, and sum(), which starts from 0
        return self + other

    def __rmul__(self, other):  # 2 * v
        return self * other

    def __rsub__(self, other):  # 2 - v
        return other + (-self)

    def __rtruediv__(self, other):  # 2 / v
        return other * self**-1

    def topological_order(self):
        """Every Value this one was computed from, and itself last, each listed after the Values it
        was made from."""
        order, seen = [], set()

        def visit(v):
            if v not in seen:
                seen.add(v)
                for source, _ in v._inputs:
                    visit(source)
                order.append(v)

        visit(self)
        return order

    def backward(self):
        # A Value can feed several others (x * y + x uses x twice); its gradient is complete only
        # when every use has added its share. Walking the topological order backwards reaches every
        # Value after all the Values that use it.
        self.grad = 1.0  # d(self)/d(self)
        for v in reversed(self.topological_order()):
            for source, local in v._inputs:
                source.grad += local * v.grad  # the chain rule; += sums the shares of every use


# ---- a neural network of Values


class Neuron:
    def __init__(self, nin, rng=random, nonlin=True):
        # weights of std 1/sqrt(nin), so that w·x starts near 1 in size and tanh is not flat
        # (saturated) at the start
        self.w = [Value(rng.gauss(0, nin**-0.5)) for _ in range(nin)]
        self.b = Value(0.0)
        # tanh, except in the last layer: an output must be free to take any value
        self.nonlin = nonlin

    def __call__(self, x):
        act = sum((wi * xi for wi, xi in zip(self.w, x)), self.b)  # w·x + b
        return act.tanh() if self.nonlin else act

    def parameters(self):
        return self.w + [self.b]


class Layer:
    def __init__(self, nin, nout, rng=random, nonlin=True):
        self.neurons = [Neuron(nin, rng, nonlin) for _ in range(nout)]

    def __call__(self, x):
        return [neuron(x) for neuron in self.neurons]  # nout Values, each neuron reading all of x

    def parameters(self):
        return [p for neuron in self.neurons for p in neuron.parameters()]


class MLP:
    def __init__(self, nin, nouts, rng=random):
        sizes = [nin, *nouts]
        last = len(nouts) - 1
        self.layers = [
            Layer(sizes[i], sizes[i + 1], rng, nonlin=i < last) for i in range(len(nouts))
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x  # a list of nouts[-1] Values

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]


# ---- training it on a toy problem


def make_data(n, rng):
    """n numbers x drawn from [-1, 1], each with its target y = 2x² - 1: a curve, which no straight
    line fits."""
    xs = [rng.uniform(-1, 1) for _ in range(n)]
    return xs, [2 * x**2 - 1 for x in xs]


def train(args):
    # one seeded generator for the data and the weights: every run is the same
    rng = random.Random(args.seed)
    xs, ys = make_data(args.points, rng)
    model = MLP(1, [8, 8, 1], rng)
    params = model.parameters()
    print(f"{len(params)} parameters, {len(xs)} points, {args.steps} steps at lr {args.lr}")
    for step in range(args.steps):
        preds = [model([x])[0] for x in xs]
        loss = sum((pred - y) ** 2 for pred, y in zip(preds, ys)) / len(xs)  # mean squared error
        if not args.no_zero_grad:
            for p in params:
                # backward() adds into .grad: left alone, every step would add to all the steps
                # before
                p.grad = 0.0
        loss.backward()
        for p in params:
            p.data -= args.lr * p.grad  # a small step downhill
        print(f"step {step:4d} | loss {loss.data:.6f}")


class ArgumentParser(argparse.ArgumentParser):
    # one line on stderr and exit status 1, instead of the usage text and status 2
    def error(self, message):
        sys.exit(f"{self.prog}: error: {message} (see --help)")


def positive(kind):
    def parse(text):
        value = kind(text)  # a ValueError here is argparse's "invalid value"
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"expected a positive number, found {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def parse_args(argv=None):
    p = ArgumentParser(
        description="Train a small MLP of Values by gradient descent on a toy problem."
    )
    p.add_argument("--steps", type=positive(int), default=60, help="gradient descent steps")
    p.add_argument("--lr", type=positive(float), default=0.2, help="learning rate")
    p.add_argument("--points", type=positive(int), default=16, help="size of the toy dataset")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights")
    p.add_argument(
        "--no-zero-grad", action="store_true", help="the bug: skip resetting the gradients"
    )
    args = p.parse_args(argv)
    if args.points > 500:  # backward()'s visit recurses along the loss's sum, one level per point
        p.error(f"--points {args.points}: at most 500, within Python's recursion limit")
    return args


def main(argv=None):
    train(parse_args(argv))


if __name__ == "__main__":
    main()
