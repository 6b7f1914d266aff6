"""The engine's speed in one table: both styles of autodiff next to their peers, per row.

    python benchmarks/bench_table.py            # every row (a few minutes); make bench
    python benchmarks/bench_table.py --quick    # smoke run (seconds)

Rows: the chain of 999 ops on 1 and on 1000 elements (time per op, forward + backward),
1000 SGD steps of XOR (MLP 2-8-2, ``nn.train``), a step of the digits-sized MLP
64-128-10 (batch 64) and of MLP 784-1024-1024-10 (batch 256), then the peak memory of
that step. Each row is measured as ``bench_engine.py`` and ``bench_training.py`` measure
it (their output is printed first); the table gives each peer's time as a ratio to
PyTorch's (to NumPy's for the memory row), and checks the targets of the speed issue.
A peer that is not installed, or has no version of a row, is a column of dashes: JAX
has no implementation here yet.
"""

from __future__ import annotations

import argparse

import bench_engine as engine
import bench_training as training

COLUMNS = ("NumPy by hand", "define-by-run", "Executor", "PyTorch CPU", "JAX jit")
# Each column's peer name in the two scripts (None: not measured).
ENGINE = dict(zip(COLUMNS, ("numpy", engine.IMP, engine.SYM, "torch", None), strict=True))
TRAINING = dict(
    zip(COLUMNS, ("numpy", training.REBUILT, training.COMPILED, "torch", None), strict=True)
)
# (row, peer column, limit, against): the targets of the speed issue.
TARGETS = [
    ("chain, 1 element, per op", "define-by-run", 0.5, "PyTorch CPU"),
    ("chain, 1000 elements, per op", "define-by-run", 0.5, "PyTorch CPU"),
    ("XOR 2-8-2, 1000 SGD steps", "define-by-run", 0.7, "PyTorch CPU"),
    ("digits MLP 64-128-10, per step", "define-by-run", 0.7, "PyTorch CPU"),
    ("digits MLP 64-128-10, per step", "Executor", 1.3, "NumPy by hand"),
    ("MLP 784-1024-1024-10, per step", "define-by-run", 1.15, "NumPy by hand"),
    ("MLP 784-1024-1024-10, per step", "Executor", 1.1, "NumPy by hand"),
    ("peak memory of that step", "define-by-run", 1.3, "NumPy by hand"),
    ("peak memory of that step", "Executor", 1.3, "NumPy by hand"),
]


def row(medians: dict, names: dict, unit: str) -> dict:
    return {c: (medians[n], unit) for c, n in names.items() if n is not None and n in medians}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few, short repeats (smoke run)")
    args = parser.parse_args()
    args.repeat, args.target = (3, 0.01) if args.quick else (11, 0.2)
    train_args = argparse.Namespace(quick=args.quick, repeat=2 if args.quick else 7)
    engine.header()
    results: dict = {}
    engine.bench_chain(1, args, results)
    engine.bench_chain(1000, args, results)
    xor = training.bench("xor", train_args)
    engine.bench_mlp("mlp-small", (64, 128, 10), 64, args, results)
    engine.bench_mlp("mlp-large", (784, 1024, 1024, 10), 256, args, results)
    engine.bench_memory(args, results)
    rows = {
        "chain, 1 element, per op": row(results["chain-1"], ENGINE, "us"),
        "chain, 1000 elements, per op": row(results["chain-1000"], ENGINE, "us"),
        "XOR 2-8-2, 1000 SGD steps": row(xor, TRAINING, "us"),
        "digits MLP 64-128-10, per step": row(results["mlp-small"], ENGINE, "ms"),
        "MLP 784-1024-1024-10, per step": row(results["mlp-large"], ENGINE, "ms"),
        "peak memory of that step": row(results["memory"], ENGINE, "MiB"),
    }
    print("\n== the engine, in one table: each peer's time as a ratio to PyTorch's ==")
    print("(memory: to NumPy's; - : not installed or not written)\n")
    print("| benchmark | " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " --- |" * len(COLUMNS))
    for name, cells in rows.items():
        base = "NumPy by hand" if name.startswith("peak") else "PyTorch CPU"
        texts = []
        for column in COLUMNS:
            if column not in cells:
                texts.append("-")
            elif column == base or base not in cells:
                texts.append(f"1 ({cells[column][0]:.3g} {cells[column][1]})")
            else:
                texts.append(f"{cells[column][0] / cells[base][0]:.2f}x")
        print(f"| {name} | " + " | ".join(texts) + " |")
    print("\n== targets ==")
    for name, column, limit, against in TARGETS:
        cells = rows[name]
        if column in cells and against in cells:
            ratio = cells[column][0] / cells[against][0]
            verdict = "met" if ratio <= limit else "NOT met"
            print(f"  {name}: {column} {ratio:.2f}x {against} (<= {limit}x) {verdict}")


if __name__ == "__main__":
    main()
