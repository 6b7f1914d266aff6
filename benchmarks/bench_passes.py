"""How much the graph passes (autodiff/passes.py) shrink the lectures' gradient graphs, and
what that saves when an Executor runs them.

    python benchmarks/bench_passes.py            # 15 interleaved rounds per example
    python benchmarks/bench_passes.py --quick    # 3 rounds

Each example is a forward graph and its gradients, run as ``Executor([y, *grads])``
without and with ``optimize=True``. Printed: nodes before and after, the median time of
one ``run`` over interleaved rounds (the two executors take turns), and their ratio
(below 1: the optimised graph is faster). The values of the two are checked to agree.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import autodiff as ad
from autodiff import nn
from autodiff.symbolic import logistic_map

Example = tuple[list[ad.Node], dict]  # outputs, feed


def lecture_example(declared: bool) -> Example:
    """y = x * y + sin(x) at (3, 4): with shapes declared, or none (as lecture 3 writes)."""
    shape, dtype = ((), "float64") if declared else (None, None)
    x, y = ad.Variable("x", shape, dtype), ad.Variable("y", shape, dtype)
    f = x * y + ad.sin(x)
    return [f, *ad.gradients(f, [x, y])], {x: 3.0, y: 4.0}


def logistic(n: int = 10) -> Example:
    """l(n) with l(k + 1) = 4 l(k) (1 - l(k)), on an undeclared x (lecture 2)."""
    x = ad.Variable("x")
    f = logistic_map(x, n)
    return [f, *ad.gradients(f, [x])], {x: np.float64(0.3)}


def cross_entropy_fine(logits, onehot):
    """Lecture 1's softmax cross-entropy composed of fine ops."""
    log_norm = ad.log(ad.exp(logits).sum(axis=-1, keepdims=True))
    return -(onehot * (logits - log_norm)).sum(axis=-1).mean()


def cross_entropy(loss_fn: Callable) -> Example:
    """Softmax cross-entropy on a batch of 64 rows, 10 classes, float32."""
    logits = ad.Variable("logits", shape=(None, 10), dtype="float32")
    onehot = ad.Variable("onehot", shape=(None, 10), dtype="float32")
    loss = loss_fn(logits, onehot)
    rng = np.random.default_rng(0)
    feed = {logits: rng.standard_normal((64, 10)), onehot: np.eye(10)[rng.integers(0, 10, 64)]}
    return [loss, *ad.gradients(loss, [logits])], feed


def mlp() -> Example:
    """A 64-128-10 ReLU MLP, batch 64, float32: the loss and the gradients of W1 b1 W2 b2."""
    model = nn.MLP([64, 128, 10], seed=0)
    x = ad.Variable("x", shape=(None, 64), dtype="float32")
    labels = ad.Variable("labels", shape=(None,), dtype="int64")
    loss = nn.cross_entropy(model(x), labels)
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((64, 64)), labels: rng.integers(0, 10, 64)}
    return [loss, *ad.gradients(loss, model.parameters())], feed


EXAMPLES: dict[str, Callable[[], Example]] = {
    "x*y + sin(x), shapes declared": lambda: lecture_example(True),
    "x*y + sin(x), shapes unknown": lambda: lecture_example(False),
    "logistic map, n = 10": logistic,
    "softmax cross-entropy (one op)": lambda: cross_entropy(ad.softmax_cross_entropy),
    "softmax cross-entropy (fine ops)": lambda: cross_entropy(cross_entropy_fine),
    "MLP 64-128-10": mlp,
}


def median_seconds(runs: dict[str, Callable[[], object]], rounds: int, number: int) -> dict:
    """Median time of one call of each run, over interleaved rounds of ``number`` calls."""
    times: dict[str, list[float]] = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            start = time.perf_counter()
            for _ in range(number):
                run()
            times[key].append((time.perf_counter() - start) / number)
    return {key: statistics.median(t) for key, t in times.items()}


def measure(name: str, example: Example, rounds: int) -> str:
    outputs, feed = example
    plain, optimized = ad.Executor(outputs), ad.Executor(outputs, optimize=True)
    for a, b in zip(plain.run(feed), optimized.run(feed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    report = optimized.optimize_report
    assert report is not None
    times = median_seconds(
        {"plain": lambda: plain.run(feed), "optimized": lambda: optimized.run(feed)},
        rounds,
        number=200 if report.nodes_before < 200 else 20,
    )
    before, after = 1e6 * times["plain"], 1e6 * times["optimized"]
    return (
        f"{name:<34} {report.nodes_before:>6} {report.nodes_after:>6}"
        f" {before:>10.1f} {after:>10.1f} {after / before:>7.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 15")
    rounds = 3 if parser.parse_args().quick else 15
    print(f"{'example (forward + gradients)':<34} {'nodes':>6} {'after':>6}", end="")
    print(f" {'run (us)':>10} {'after (us)':>10} {'ratio':>7}")
    for name, build in EXAMPLES.items():
        print(measure(name, build(), rounds))


if __name__ == "__main__":
    main()
