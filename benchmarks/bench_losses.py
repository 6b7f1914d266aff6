"""Coarse vs composed softmax cross-entropy: forward + gradient, batch sizes 1 to 65536.

    python benchmarks/bench_losses.py            # every row (about a minute)
    python benchmarks/bench_losses.py --quick    # smoke run (seconds)

Lecture 1 says a coarse op beats the same function composed of fine ops. This checks
it for ``ad.softmax_cross_entropy`` against ``ad.softmax_cross_entropy_composed`` in
the two settings the course uses:

* ``define-by-run``: 10 classes, float32 logits, integer class labels; each step
  builds the graph from ``ad.tensor`` and calls ``ad.gradients`` (as a training loop
  does, so the gradient cache is warm);
* ``Executor``: 100 classes, float64 logits and one-hot float64 labels, as lecture 1
  times them; the graph and its gradient are built once, ``Executor.run`` each step.

Both versions run on the same arrays, taking turns round after round; the median time
of each and the median of the rounds' ratios (composed / coarse: above 1, the coarse
op is faster) are printed. The first step of each is checked against the other.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import autodiff as ad

BATCHES = (1, 16, 256, 4096, 65536)
VERSIONS = {"coarse": ad.softmax_cross_entropy, "composed": ad.softmax_cross_entropy_composed}


def define_by_run(loss_fn, logits, labels):
    def step():
        z = ad.tensor(logits)
        loss = loss_fn(z, labels)
        (grad,) = ad.gradients(loss, [z])
        return loss.value, grad.value

    return step


def with_executor(loss_fn, logits, labels):
    z, p = ad.Variable("logits"), ad.Variable("labels")
    loss = loss_fn(z, p)
    executor = ad.Executor([loss, *ad.gradients(loss, [z])])
    return lambda: tuple(executor.run({z: logits, p: labels}))


SETTINGS = {  # name: (classes, dtype, labels as probabilities, how a step runs)
    "define-by-run": (10, np.float32, False, define_by_run),
    "Executor": (100, np.float64, True, with_executor),
}


def rounds_for(batch: int, quick: bool) -> int:
    return 3 if quick else 21 if batch <= 4096 else 7


def measure(setting: str, batch: int, quick: bool) -> dict[str, list[float]]:
    classes, dtype, probabilities, make = SETTINGS[setting]
    rng = np.random.default_rng(batch)
    logits = rng.standard_normal((batch, classes)).astype(dtype)
    labels = rng.integers(0, classes, batch)
    if probabilities:
        labels = np.eye(classes, dtype=dtype)[labels]
    steps = {name: make(fn, logits, labels) for name, fn in VERSIONS.items()}
    first = {name: step() for name, step in steps.items()}  # and a warm-up
    for a, b in zip(first["coarse"], first["composed"], strict=True):
        if not np.allclose(a, b, rtol=1e-4, atol=1e-6):
            print(f"  warning: coarse and composed differ at batch {batch}")
    for step in steps.values():
        step()  # the cache compiles on the second sighting
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds_for(batch, quick)):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (smoke run)")
    args = parser.parse_args()
    print("== softmax cross-entropy: coarse op vs composed of fine ops (forward + gradient) ==")
    slower = []
    for setting, (classes, dtype, probabilities, _) in SETTINGS.items():
        labels = "one-hot probabilities" if probabilities else "class indices"
        print(f"\n{setting}: {classes} classes, {np.dtype(dtype).name}, {labels}")
        print(f"{'batch':>7} {'coarse ms':>10} {'composed ms':>12} {'composed / coarse':>18}")
        for batch in BATCHES:
            times = measure(setting, batch, args.quick)
            ratio = statistics.median(
                b / a for a, b in zip(times["coarse"], times["composed"], strict=True)
            )
            coarse, composed = (1e3 * statistics.median(times[n]) for n in VERSIONS)
            print(f"{batch:>7} {coarse:>10.3f} {composed:>12.3f} {ratio:>17.2f}x")
            if ratio <= 1:
                slower.append(f"{setting}, batch {batch}")
    verdict = "faster at every batch size" if not slower else f"not faster at {slower}"
    print(f"\ntarget (speed issue): the coarse op is faster at every batch size: {verdict}")


if __name__ == "__main__":
    main()
