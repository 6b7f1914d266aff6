"""conv2d forward + backward (im2col, one matmul, col2im) next to PyTorch's CPU convolution.

    python benchmarks/bench_conv.py            # 21 rounds per case, under a minute
    python benchmarks/bench_conv.py --quick    # smoke run: 1 round (seconds)

Cases (NCHW, 3x3 kernels, padding 1, stride 1):

* ``mnist-like``: N=32, C=3 -> 16, 28x28;
* ``mid``: N=64, C=16 -> 32, 14x14;
* ``digits``: N=64, C=1 -> 8, 8x8 (the bundled digits dataset's size).

One step is the forward convolution and the gradients of x, w and b for a fixed output
adjoint dY (the same for every peer). Peers: autodiff imperative (the graph is rebuilt
each step), autodiff symbolic (built once, ``Executor.run`` each step), PyTorch on the
CPU (if installed). The first step of each peer is checked against autodiff's; then the
peers take turns for the rounds; medians, and the median of each round's ratio
(autodiff / torch), are printed.
NumPy and PyTorch keep their default thread counts (the header prints them).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import autodiff as ad

CASES = {  # name: (N, C, F, H)
    "mnist-like": (32, 3, 16, 28),
    "mid": (64, 16, 32, 14),
    "digits": (64, 1, 8, 8),
}


def arrays(n: int, c: int, f: int, h: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((f, c, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32)
    dy = rng.standard_normal((n, f, h, h)).astype(np.float32)
    return x, w, b, dy


def autodiff_peers(x, w, b, dy) -> dict:
    def imperative():
        leaves = [ad.tensor(a) for a in (x, w, b)]
        out = ad.conv2d(*leaves, padding=1)
        grads = ad.gradients(out, leaves, ad.constant(dy))
        return [out.value] + [g.value for g in grads]

    xs = ad.Variable("x", shape=x.shape, dtype="float32")
    ws = ad.Variable("w", shape=w.shape, dtype="float32")
    bs = ad.Variable("b", shape=b.shape, dtype="float32")
    dys = ad.Variable("dy", shape=dy.shape, dtype="float32")
    out = ad.conv2d(xs, ws, bs, padding=1)
    executor = ad.Executor([out, *ad.gradients(out, [xs, ws, bs], dys)])
    feed = {xs: x, ws: w, bs: b, dys: dy}

    def symbolic():
        return executor.run(feed)

    return {"autodiff imperative": imperative, "autodiff symbolic": symbolic}


def torch_peer(x, w, b, dy):
    try:
        import torch
    except ImportError:
        return None
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    tdy = torch.tensor(dy)

    def step():
        for t in (tx, tw, tb):
            t.grad = None
        out = torch.nn.functional.conv2d(tx, tw, tb, padding=1)
        out.backward(tdy)
        return [out.detach().numpy()] + [t.grad.numpy() for t in (tx, tw, tb)]

    return step


def measure(peers: dict, rounds: int) -> dict[str, list[float]]:
    reference = next(iter(peers.values()))()
    for name, run in peers.items():  # warm-up, and the same numbers as autodiff's
        for got, want in zip(run(), reference, strict=True):
            if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
                print(f"  warning: {name} differs by {np.max(np.abs(got - want)):.3g}")
    times: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, run in peers.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def report(name: str, shape, times: dict[str, list[float]]) -> None:
    n, c, f, h = shape
    print(f"\n{name}: N={n}, C={c} -> {f}, {h}x{h}, 3x3 kernel, padding 1")
    medians = {peer: statistics.median(t) for peer, t in times.items()}
    for peer, t in times.items():
        print(
            f"  {peer:<20} {medians[peer] * 1e3:9.2f} ms  "
            f"(min {min(t) * 1e3:.2f}, max {max(t) * 1e3:.2f})"
        )
    if "torch CPU" in medians:  # the peers ran in turns: a ratio per round, then its median
        for peer in ("autodiff imperative", "autodiff symbolic"):
            ratios = [a / t for a, t in zip(times[peer], times["torch CPU"], strict=True)]
            print(f"  {peer} / torch: {statistics.median(ratios):.2f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round (a smoke run)")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else 21
    try:
        import torch

        torch_version = f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        torch_version = "torch not installed"
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, NumPy "
        f"{np.__version__}, {torch_version}; float32, medians of {rounds} rounds"
    )
    for name, shape in CASES.items():
        values = arrays(*shape)
        peers = autodiff_peers(*values)
        torch_step = torch_peer(*values)
        if torch_step is not None:
            peers["torch CPU"] = torch_step
        report(name, shape, measure(peers, rounds))


if __name__ == "__main__":
    main()
