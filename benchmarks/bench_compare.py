"""This checkout's autodiff against another checkout's, row by row: did a change keep its speed?

    git worktree add ../before HEAD~3
    python benchmarks/bench_compare.py ../before            # 5 rounds (about 10 minutes)
    python benchmarks/bench_compare.py ../before --quick    # smoke run

The rows are those of ``make bench``'s table and of ``bench_training.py`` and
``bench_losses.py``, for autodiff only: the chain of 999 ops on 1 and on 1000 elements,
the digits-sized and the large MLP step, in both styles (define-by-run and Executor);
XOR and the digits trained by ``nn.train`` (graph rebuilt and compiled); the coarse
softmax cross-entropy at batch 256 and 65536 in the losses' two settings. The timing
code is this checkout's (``bench_engine``, ``bench_training``, ``bench_losses``); only
the ``autodiff`` package differs. Each round runs one measurement of every row in a
fresh process per checkout, the two taking turns (which goes first alternates); the
table gives each row's median over the rounds and the median of the rounds' ratios
(this / other: below 1, this checkout is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def measure_round(quick: bool) -> dict[str, float]:
    """One measurement of every row, for the autodiff found first on sys.path (the
    checkout under test: ``one_round`` runs this in a fresh process per checkout)."""
    import bench_engine as engine
    import bench_losses as losses
    import bench_training as training

    args = argparse.Namespace(repeat=3 if quick else 5, target=0.01 if quick else 0.1)
    ours = (engine.IMP, engine.SYM)
    rows: dict[str, float] = {}
    for size in (1, 1000):
        data = engine.np.random.default_rng(size).uniform(-1, 1, size).astype("float32")
        steps = engine.make_steps(0, lambda data=data: (data.copy(),), ours)
        for peer, t in engine.time_steps(steps, args.repeat, args.target).items():
            rows[f"chain, {size} element(s), us per op, {peer}"] = (
                statistics.median(t) * 1e6 / engine.N_OPS
            )
    for label, sizes, batch in MLPS:
        steps = engine.make_steps(1, engine.mlp_setup(sizes, batch), ours)
        for peer, t in engine.time_steps(steps, args.repeat, args.target).items():
            rows[f"{label}, ms per step, {peer}"] = statistics.median(t) * 1e3
    for name in ("xor", "digits"):
        task = training.make_task(name, quick)
        runs = {p: training.PEERS[p](task) for p in (training.REBUILT, training.COMPILED)}
        timed = {p: (lambda r=r: (r(), [])) for p, r in runs.items()}
        for peer, t in engine.time_steps(timed, args.repeat, 0.2).items():
            rows[f"train {name}, us per step, {peer}"] = statistics.median(t) / task["steps"] * 1e6
    for setting in losses.SETTINGS:
        for batch in (256, 65536):
            t = losses.measure(setting, batch, quick)["coarse"]
            rows[f"softmax cross-entropy, {setting}, batch {batch}, ms"] = (
                statistics.median(t) * 1e3
            )
    return rows


MLPS = (("MLP 64-128-10", (64, 128, 10), 64), ("MLP 784-1024-1024-10", (784, 1024, 1024, 10), 256))


def one_round(checkout: Path, quick: bool) -> dict[str, float]:
    """``measure_round`` in a fresh process that imports ``checkout``'s autodiff."""
    env = dict(os.environ, PYTHONPATH=f"{checkout}{os.pathsep}{HERE}")
    program = f"import bench_compare, json; print(json.dumps(bench_compare.measure_round({quick})))"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=HERE, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"the round for {checkout} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (its root folder)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 short rounds (smoke run)")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    checkouts = {"this": ROOT, "other": args.other.resolve()}
    if not (checkouts["other"] / "autodiff" / "__init__.py").exists():
        raise SystemExit(f"{args.other} holds no autodiff package")
    results: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for k in range(rounds):
        order = ["this", "other"] if k % 2 == 0 else ["other", "this"]
        for which in order:
            results[which].append(one_round(checkouts[which], args.quick))
        print(f"round {k + 1} of {rounds} done", flush=True)
    print(f"\nthis: {checkouts['this']}\nother: {checkouts['other']}\n")
    print("| row | other | this | this / other |")
    print("| --- | ---: | ---: | ---: |")
    slower = []
    for row in results["this"][0]:
        this = [r[row] for r in results["this"]]
        other = [r[row] for r in results["other"]]
        ratio = statistics.median(a / b for a, b in zip(this, other, strict=True))
        print(
            f"| {row} | {statistics.median(other):.4g} | {statistics.median(this):.4g} "
            f"| {ratio:.3f} |"
        )
        if ratio > 1.05:
            slower.append(row)
    verdict = "no row slower by more than 5%" if not slower else f"slower by >5%: {slower}"
    print(f"\n{verdict}")


if __name__ == "__main__":
    main()
