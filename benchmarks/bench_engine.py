"""Speed and memory of autodiff next to hand-written NumPy, PyTorch (CPU), HIPS autograd
and micrograd, on the same float32 inputs, in one run.

    python benchmarks/bench_engine.py            # everything (a few minutes)
    python benchmarks/bench_engine.py --quick    # smoke run (seconds)
    python benchmarks/bench_engine.py --only chain,memory

Benchmarks: ``chain`` (999 elementwise ops, forward + backward, on 1 and 1000 elements),
``mlp-small`` (64-128-10 training step), ``mlp-large`` (784-1024-1024-10) and ``memory``
(tracemalloc peak of one mlp-large step). Each peer is optional: a missing one prints
"not installed". Timings are medians over interleaved repeats (peers take turns, so a
slow spell of a noisy machine hits all of them), with the garbage collector on (autodiff's
define-by-run steps pause it while gradients are built, as its training loop does).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
from importlib.metadata import PackageNotFoundError, version

import numpy as np

import autodiff as ad
from autodiff.gradients import collector_paused

N_OPS = 999
CYCLE = "sin, tanh, x * 1.01"  # repeated 333 times; bounded, so no overflow
LR = 0.01  # plain SGD, in place, the same for every peer: p -= LR * grad
IMP, SYM = "autodiff imperative", "autodiff symbolic"
KEPT = "autodiff imperative, values kept"  # retain_graph=True (the memory row only)
# autodiff's define-by-run steps pause the cycle collector for the step, as ad.nn's
# training loop does (graphs are acyclic; see gradients.collector_paused).
PAUSED = collector_paused


class Skip(Exception):
    """A peer that cannot (or should not) run this benchmark; the message says why."""


def need(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise Skip("not installed") from None


def apply_chain(x, sin, tanh):
    for i in range(N_OPS):
        x = sin(x) if i % 3 == 0 else tanh(x) if i % 3 == 1 else x * 1.01
    return x


def sgd_for(params):
    """Plain SGD in place, p -= LR * grad; scratch allocated up front, as optimizer state."""
    scratch = [np.empty_like(p) for p in params]

    def update(grads):
        for p, g, s in zip(params, grads, scratch, strict=True):
            p -= np.multiply(g, LR, out=s)

    return update


# Chain: each factory takes the input array and returns step() -> (value, [gradient]).


def chain_numpy(data):
    def step():
        vals = [data]
        for i in range(N_OPS):
            x = vals[-1]
            vals.append(np.sin(x) if i % 3 == 0 else np.tanh(x) if i % 3 == 1 else x * 1.01)
        g = np.ones_like(data)
        for i in reversed(range(N_OPS)):
            if i % 3 == 0:
                g *= np.cos(vals[i])
            elif i % 3 == 1:
                g *= 1 - vals[i + 1] * vals[i + 1]
            else:
                g *= 1.01
        return vals[-1].sum(), [g]

    return step


def chain_imperative(data):
    def step():
        with PAUSED():  # the whole step, as nn.train's define-by-run step
            x = ad.tensor(data)
            y = apply_chain(x, ad.sin, ad.tanh).sum()
            grads = ad.gradients(y, [x], retain_graph=False)  # as nn.train and PyTorch
        return y.value, [g.value for g in grads]

    return step


def chain_symbolic(data):
    x = ad.Variable("x", shape=data.shape, dtype=data.dtype)
    y = apply_chain(x, ad.sin, ad.tanh).sum()
    executor = ad.Executor([y, *ad.gradients(y, [x])])

    def step():
        value, *grads = executor.run({x: data})
        return value, grads

    return step


def chain_torch(data):
    torch = need("torch")

    def step():
        x = torch.from_numpy(data).requires_grad_()
        y = apply_chain(x, torch.sin, torch.tanh).sum()
        y.backward()
        return y.item(), [x.grad.numpy()]

    return step


def chain_autograd(data):
    anp = need("autograd.numpy").numpy
    value_and_grad = need("autograd").value_and_grad(
        lambda x: apply_chain(x, anp.sin, anp.tanh).sum()
    )

    def step():
        value, grad = value_and_grad(data)
        return value, [grad]

    return step


def chain_micrograd(data):
    if data.size != 1:
        raise Skip("scalar engine: one Python object per number, skipped for arrays")
    value_class = need("micrograd.engine").engine.Value

    # micrograd 0.1.0 has no sin/tanh: add them the way it writes relu (float64 math).
    def unary(f, df):
        def op(v):
            out = value_class(f(v.data), (v,), f.__name__)

            def _backward():
                v.grad += df(v.data, out.data) * out.grad

            out._backward = _backward
            return out

        return op

    m_sin = unary(math.sin, lambda x, y: math.cos(x))
    m_tanh = unary(math.tanh, lambda x, y: 1 - y * y)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * N_OPS))  # recursive topo sort

    def step():
        x = value_class(float(data[0]))
        y = apply_chain(x, m_sin, m_tanh)
        y.backward()
        return y.data, [np.array([x.grad])]

    return step


# MLP training step: factories take (params, x, labels), return step() -> (loss, grads).


def mlp_numpy(params, x, labels):
    rows, n, sgd = np.arange(len(x)), len(x), sgd_for(params)

    def forward_backward():  # written with care: in place where natural, frees as it goes
        acts = [x]
        for w, b in zip(params[:-2:2], params[1:-2:2], strict=True):
            h = acts[-1] @ w
            h += b
            acts.append(np.maximum(h, 0, out=h))
        logits = acts[-1] @ params[-2]
        logits += params[-1]
        logits -= logits.max(axis=1, keepdims=True)
        d = np.exp(logits)
        total = d.sum(axis=1, keepdims=True)
        loss = np.log(total).mean() - logits[rows, labels].mean()
        d /= total * n  # d loss / d logits = (softmax - one_hot) / batch
        d[rows, labels] -= 1 / n
        grads = [None] * len(params)
        for i in reversed(range(0, len(params), 2)):
            a = acts.pop()
            grads[i], grads[i + 1] = a.T @ d, d.sum(axis=0)
            if i:
                d = d @ params[i].T
                d *= a > 0
        return loss, grads

    def step():
        loss, grads = forward_backward()
        sgd(grads)
        return loss, grads

    return step


def ad_loss(h, ps, labels):
    for w, b in zip(ps[:-2:2], ps[1:-2:2], strict=True):
        h = ad.relu(h @ w + b)
    return ad.softmax_cross_entropy(h @ ps[-2] + ps[-1], labels)


def mlp_imperative(params, x, labels, retain_graph=False):
    """A step as nn.train takes it: intermediate values let go by the backward pass, as
    PyTorch does (``retain_graph=False``); the memory row also shows them kept."""
    ps = [ad.tensor(p) for p in params]  # leaves kept across steps, updated in place
    xc, yc, sgd = ad.constant(x), ad.constant(labels), sgd_for([p.value for p in ps])

    def step():
        with PAUSED():  # the whole step, as nn.train's define-by-run step
            loss = ad_loss(xc, ps, yc)
            grads = [g.value for g in ad.gradients(loss, ps, retain_graph=retain_graph)]
        sgd(grads)
        return loss.value, grads

    return step


def mlp_symbolic(params, x, labels):
    xv = ad.Variable("x", shape=(None, x.shape[1]), dtype=x.dtype)
    yv = ad.Variable("labels", shape=(None,), dtype=labels.dtype)
    pv = [ad.Variable(f"p{i}", shape=p.shape, dtype=p.dtype) for i, p in enumerate(params)]
    loss = ad_loss(xv, pv, yv)
    executor, sgd = ad.Executor([loss, *ad.gradients(loss, pv)]), sgd_for(params)
    feed = {xv: x, yv: labels, **dict(zip(pv, params, strict=True))}  # params change in place

    def step():
        value, *grads = executor.run(feed)
        sgd(grads)
        return value, grads

    return step


def mlp_torch(params, x, labels):
    torch = need("torch")
    ps = [torch.from_numpy(p).requires_grad_() for p in params]
    xt, yt = torch.from_numpy(x), torch.from_numpy(labels)

    def step():
        h = xt
        for w, b in zip(ps[:-2:2], ps[1:-2:2], strict=True):
            h = torch.relu(h @ w + b)
        loss = torch.nn.functional.cross_entropy(h @ ps[-2] + ps[-1], yt)
        loss.backward()
        grads = [p.grad for p in ps]
        with torch.no_grad():
            for p in ps:
                p.add_(p.grad, alpha=-LR)
                p.grad = None
        return loss.item(), [g.numpy() for g in grads]

    return step


def mlp_autograd(params, x, labels):
    anp = need("autograd.numpy").numpy
    rows, sgd = np.arange(len(x)), sgd_for(params)

    def loss_fn(ps):
        h = x
        for w, b in zip(ps[:-2:2], ps[1:-2:2], strict=True):
            h = anp.maximum(h @ w + b, 0)
        logits = h @ ps[-2] + ps[-1]
        shifted = logits - anp.max(logits, axis=1, keepdims=True)
        return anp.mean(anp.log(anp.sum(anp.exp(shifted), axis=1))) - anp.mean(
            shifted[rows, labels]
        )

    value_and_grad = need("autograd").value_and_grad(loss_fn)

    def step():
        loss, grads = value_and_grad(params)
        sgd(grads)
        return loss, grads

    return step


def mlp_micrograd(params, x, labels):
    need("micrograd")
    raise Skip("scalar engine: no exp/log for the loss, and ~1.2M Value objects per small step")


PEERS = {  # name: (chain factory, MLP factory)
    "numpy": (chain_numpy, mlp_numpy),
    IMP: (chain_imperative, mlp_imperative),
    SYM: (chain_symbolic, mlp_symbolic),
    "torch": (chain_torch, mlp_torch),
    "autograd": (chain_autograd, mlp_autograd),
    "micrograd": (chain_micrograd, mlp_micrograd),
}


# Measuring and reporting.


def make_steps(kind: int, make_args, names=tuple(PEERS)) -> dict:
    """One step function per peer (each on its own copy of the inputs); skips printed."""
    steps = {}
    for name in names:
        try:
            steps[name] = PEERS[name][kind](*make_args())
        except Skip as why:
            print(f"  {name:<22} skipped: {why}")
    return steps


def check(steps: dict) -> None:
    """First step of each peer (same parameters for all) against hand-written NumPy."""
    results = {name: step() for name, step in steps.items()}
    ref_value, ref_grads = results["numpy"]
    for name, (value, grads) in results.items():
        pairs = [(value, ref_value), *zip(grads, ref_grads, strict=True)]
        if not all(np.allclose(a, b, rtol=2e-3, atol=2e-3 * np.abs(b).max()) for a, b in pairs):
            print(f"  WARNING: {name} disagrees with NumPy on the loss or a gradient")


def time_steps(steps: dict, repeat: int, target_s: float) -> dict[str, list[float]]:
    """Seconds per step for each peer: ``repeat`` rounds, peers taking turns each round."""
    numbers = {}
    for name, step in steps.items():
        step()  # warm-up
        start = time.perf_counter()
        step()
        numbers[name] = max(1, round(target_s / (time.perf_counter() - start)))
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeat):
        for name, step in steps.items():
            gc.collect()
            start = time.perf_counter()
            for _ in range(numbers[name]):
                step()
            times[name].append((time.perf_counter() - start) / numbers[name])
    return times


def report(times: dict, scale: float, unit: str) -> dict[str, float]:
    """Print median and min-max per peer, and the ratios autodiff / peer; return medians."""
    med = {name: statistics.median(t) * scale for name, t in times.items()}
    ours = [style for style in (IMP, SYM) if style in med]
    print(
        f"  {'peer':<22}{'median':>12}{'min - max':>22}"
        + "".join(f"{s[9:] + '/peer':>16}" for s in ours)
    )
    for name, t in times.items():
        spread = f"{min(t) * scale:.4g} - {max(t) * scale:.4g}"
        ratios = "".join(f"{med[s] / med[name]:>15.2f}x" for s in ours)
        print(f"  {name:<22}{med[name]:>9.4g} {unit:<2}{spread:>22}{ratios}")
    return med


def mlp_setup(sizes, batch):
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        params += [
            rng.standard_normal((fan_in, fan_out)) * math.sqrt(2 / fan_in),
            np.zeros(fan_out),
        ]
    params = [p.astype(np.float32) for p in params]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    labels = rng.integers(0, sizes[-1], batch)
    return lambda: ([p.copy() for p in params], x, labels)


def bench_chain(size, args, results):
    data = np.random.default_rng(size).uniform(-1, 1, size).astype(np.float32)
    elements = f"{size} element" + "s" * (size > 1)
    print(f"\n== chain of {N_OPS} ops ({CYCLE}), {elements}: time per op, fwd + bwd ==")
    steps = make_steps(0, lambda: (data.copy(),))
    check(steps)
    times = time_steps(steps, args.repeat, args.target)
    results[f"chain-{size}"] = report(times, 1e6 / N_OPS, "us")


def bench_mlp(label, sizes, batch, args, results):
    print(
        f"\n== MLP {'-'.join(map(str, sizes))}, batch {batch}, ReLU, softmax cross-entropy, SGD:"
        " time per training step =="
    )
    steps = make_steps(1, mlp_setup(sizes, batch))
    check(steps)
    results[label] = report(time_steps(steps, args.repeat, args.target), 1e3, "ms")


def bench_memory(args, results):
    print(
        "\n== peak memory of one 784-1024-1024-10 step, batch 256 (tracemalloc; params excluded) =="
    )
    print("  torch skipped: its allocator does not report to tracemalloc")
    names = ("numpy", IMP, SYM, "autograd")
    setup = mlp_setup((784, 1024, 1024, 10), 256)
    steps = make_steps(1, setup, names)
    steps[KEPT] = mlp_imperative(*setup(), retain_graph=True)
    peaks = {}
    for name, step in steps.items():
        step()  # warm-up, outside the measurement
        gc.collect()
        tracemalloc.start()
        step()
        peaks[name] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    for name, peak in peaks.items():
        print(f"  {name:<22}{peak:>9.1f} MiB{peak / peaks['numpy']:>10.2f}x NumPy")
    results["memory"] = peaks


def targets(results):
    print("\n== targets (autodiff imperative / symbolic) ==")
    checks = [
        (f"chain-{n}", "torch", 0.5, f"chain per op, {n} element{'s' * (n > 1)}, <= 0.5x torch")
        for n in (1, 1000)
    ]
    checks += [
        ("mlp-small", "torch", 0.5, "64-128-10 step <= 0.5x torch"),
        ("mlp-large", "numpy", 1.1, "784-1024-1024-10 step <= 1.1x NumPy"),
        ("memory", "numpy", 1.3, "peak memory <= 1.3x NumPy"),
    ]
    for key, peer, limit, text in checks:
        med = results.get(key, {})
        if peer not in med:
            continue
        verdicts = [
            f"{med[s] / med[peer]:.2f}x " + ("met" if med[s] / med[peer] <= limit else "NOT met")
            for s in (IMP, SYM)
            if s in med
        ]
        print(f"  {text:<44} " + " / ".join(verdicts))


def header():
    info = [
        f"Python {platform.python_version()}",
        f"{os.cpu_count()} CPUs",
        f"numpy {np.__version__}",
    ]
    for module in ("torch", "autograd", "micrograd"):
        try:
            info.append(f"{module} {version(module)}")
        except PackageNotFoundError:
            info.append(f"{module} not installed")
    try:
        import torch

        info.append(f"torch threads {torch.get_num_threads()} (its default)")
    except ImportError:
        pass
    blas = {k: v for k, v in os.environ.items() if k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    print(", ".join(info) + f"; NumPy BLAS threads: {blas or 'default (all CPUs)'}")
    print("float32 everywhere, except micrograd (Python floats, i.e. float64)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few, short repeats (smoke run)")
    parser.add_argument(
        "--only", default="", help="comma-separated: chain,mlp-small,mlp-large,memory"
    )
    args = parser.parse_args()
    args.repeat, args.target = (3, 0.01) if args.quick else (11, 0.2)
    only = [w for w in args.only.split(",") if w]
    wanted = lambda name: not only or any(w in name for w in only)  # noqa: E731
    header()
    results: dict = {}
    if wanted("chain"):
        bench_chain(1, args, results)
        bench_chain(1000, args, results)
    if wanted("mlp-small"):
        bench_mlp("mlp-small", (64, 128, 10), 64, args, results)
    if wanted("mlp-large"):
        bench_mlp("mlp-large", (784, 1024, 1024, 10), 256, args, results)
    if wanted("memory"):
        bench_memory(args, results)
    targets(results)


if __name__ == "__main__":
    main()
