"""Parallel scheduling: ``Executor(outputs, workers=N)`` next to hand-written NumPy, in one run.

    python benchmarks/bench_parallel.py            # a minute or so
    python benchmarks/bench_parallel.py --quick    # smoke run (seconds)

Graphs:

* ``wide-elementwise``: 4 independent towers of 6 large elementwise ops (2**21 float64
  each, ~16 MB), summed: the case workers are for (NumPy releases the GIL in each op);
* ``wide-matmul``: 4 towers of 4 matmuls of 768 x 768, with BLAS on one thread (set
  here, before NumPy loads: a threaded BLAS would already use every core);
* ``wide-small``: 16 towers of 6 elementwise ops on 1000 elements: a node's handoff to a
  worker costs more than the op, so workers lose here;
* ``chain``: 300 elementwise ops on 1000 elements, one after the other: no two nodes
  can run at once, so ``workers=2`` falls back to the loop and must not lose.

Peers: NumPy written by hand, one tower after the other (the floor for one core) and
one tower per thread of a pool of 2 (the floor for two); autodiff with ``workers=1``
and ``workers=2``. Medians over interleaved rounds (peers take turns); the ratios
compare medians. Every result is checked against the sequential NumPy one, bit for bit.
"""

from __future__ import annotations

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before NumPy loads: one BLAS thread per matmul
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402

import autodiff as ad  # noqa: E402


def tower_ops(kind: str):
    """(autodiff step, NumPy step) for one level of a tower."""
    if kind == "matmul":
        return (lambda h, w: ad.tanh(h @ w)), (lambda h, w: np.tanh(h @ w))
    return (lambda h, w: ad.tanh(h * w) + 0.5), (lambda h, w: np.tanh(h * w) + 0.5)


def case(name: str, towers: int, depth: int, shape: tuple[int, ...], kind: str):
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal(shape) * 0.1
    w_values = [rng.standard_normal(shape) * 0.1 for _ in range(towers)]
    step, np_step = tower_ops(kind)
    x = ad.Variable("x")
    ws = [ad.Variable(f"w{i}") for i in range(towers)]
    ends = []
    for w in ws:
        h = x
        for _ in range(depth):
            h = step(h, w)
        ends.append(h)
    out = ends[0]
    for h in ends[1:]:
        out = out + h
    feed = {x: x_value, **dict(zip(ws, w_values, strict=True))}

    def numpy_tower(w):
        h = x_value
        for _ in range(depth):
            h = np_step(h, w)
        return h

    def numpy_sum(parts):
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    pool = ThreadPoolExecutor(2)
    one, two = ad.Executor([out]), ad.Executor([out], workers=2)
    peers = {
        "numpy, 1 thread": lambda: numpy_sum([numpy_tower(w) for w in w_values]),
        "numpy, 2 threads": lambda: numpy_sum(list(pool.map(numpy_tower, w_values))),
        "autodiff workers=1": lambda: one.run(feed)[0],
        "autodiff workers=2": lambda: two.run(feed)[0],
    }
    return name, peers, two, pool


def chain_case(n_ops: int):
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal(1000)
    x = ad.Variable("x")
    h = x
    for i in range(n_ops):
        h = ad.sin(h) if i % 2 else ad.tanh(h)

    def numpy_chain():
        v = x_value
        for i in range(n_ops):
            v = np.sin(v) if i % 2 else np.tanh(v)
        return v

    one, two = ad.Executor([h]), ad.Executor([h], workers=2)
    peers = {
        "numpy, 1 thread": numpy_chain,
        "autodiff workers=1": lambda: one.run({x: x_value})[0],
        "autodiff workers=2": lambda: two.run({x: x_value})[0],
    }
    return "chain", peers, two, None


def measure(peers: dict, rounds: int) -> dict[str, list[float]]:
    reference = next(iter(peers.values()))()
    for name, run in peers.items():  # warm-up, and the same bits as NumPy's
        result = run()
        if not np.array_equal(result, reference):
            print(f"  warning: {name} differs from NumPy by {np.max(np.abs(result - reference))}")
    times: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(rounds):
        for name, run in peers.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def report(name: str, times: dict[str, list[float]]) -> dict[str, float]:
    medians = {peer: statistics.median(t) for peer, t in times.items()}
    print(f"\n{name}")
    for peer, t in times.items():
        print(
            f"  {peer:<20} {medians[peer] * 1e3:9.2f} ms  "
            f"(min {min(t) * 1e3:.2f}, max {max(t) * 1e3:.2f})"
        )
    base = medians["autodiff workers=1"]
    print(f"  autodiff workers=2 / workers=1: {medians['autodiff workers=2'] / base:.2f}")
    if "numpy, 2 threads" in medians:
        print(
            f"  numpy 2 threads / 1 thread:     "
            f"{medians['numpy, 2 threads'] / medians['numpy, 1 thread']:.2f}"
        )
    return medians


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, smaller arrays")
    args = parser.parse_args(argv)
    rounds, scale = (3, 4) if args.quick else (9, 1)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, NumPy "
        f"{np.__version__}, BLAS threads 1; medians of {rounds} rounds"
    )
    cases = [
        case("wide-elementwise", 4, 6, (2**21 // scale,), "elementwise"),
        case("wide-matmul", 4, 4, (768 // scale, 768 // scale), "matmul"),
        case("wide-small", 16, 6, (1000,), "elementwise"),
        chain_case(300),
    ]
    for name, peers, executor, pool in cases:
        report(name, measure(peers, rounds))
        workers = sorted({event.worker for event in executor.trace})
        print(f"  workers used in the last run: {workers or 'none (fell back to the loop)'}")
        if pool is not None:
            pool.shutdown()


if __name__ == "__main__":
    main()
