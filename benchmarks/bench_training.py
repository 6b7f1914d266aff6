"""Training with autodiff's nn/optim/data next to PyTorch (CPU) and hand-written NumPy.

    python benchmarks/bench_training.py            # XOR and digits (about a minute)
    python benchmarks/bench_training.py --quick    # smoke run

Every peer trains the same MLP from the same initial weights on the same batches in the
same order (float32, softmax cross-entropy, SGD with momentum 0.9), so their final
losses agree and the times compare like with like:

* ``xor``: MLP 2-8-2 (tanh), the 4 points as one batch, 1000 steps;
* ``digits``: MLP 64-128-10 (ReLU), 1438 training digits in batches of 64, 5 epochs.

autodiff runs ``nn.train`` as a student would: ``compiled`` builds the graph once and
runs it with an Executor; ``rebuilt`` builds a new graph every step (define-by-run).
Times are medians of interleaved repeats of the whole run, reported per step.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from bench_engine import Skip, header, need, time_steps

from autodiff import data, nn, optim

MOMENTUM = 0.9
COMPILED, REBUILT = "autodiff compiled", "autodiff rebuilt"


def epochs_of_batches(x, y, batch_size, epochs):
    """The batches nn.train makes (same seeds), for peers that do their own loop."""
    shuffles = np.random.default_rng(0)  # nn.train's: one generator for the run
    return [list(data.batches(x, y, batch_size, True, shuffles)) for _ in range(epochs)]


def run_autodiff(compiled):
    def factory(task):
        def run():
            model = nn.MLP(task["sizes"], task["activation"], seed=0)
            opt = optim.SGD(model.parameters(), lr=task["lr"], momentum=MOMENTUM)
            history = nn.train(
                model,
                nn.cross_entropy,
                opt,
                task["x"],
                task["y"],
                epochs=task["epochs"],
                batch_size=task["batch"],
                progress=False,
                compiled=compiled,
            )
            return history.loss[-1]

        return run

    return factory


def run_numpy(task):
    act, dact = {
        "relu": (lambda h: np.maximum(h, 0), lambda a: a > 0),
        "tanh": (np.tanh, lambda a: 1 - a * a),
    }[task["activation"]]

    def run():
        params = [p.value.copy() for p in task["init"]]
        velocity = [np.zeros_like(p) for p in params]
        for epoch in task["batches"]:
            for x, labels in epoch:
                acts = [x]
                for w, b in zip(params[:-2:2], params[1:-2:2], strict=True):
                    acts.append(act(acts[-1] @ w + b))
                logits = acts[-1] @ params[-2] + params[-1]
                logits -= logits.max(axis=1, keepdims=True)
                e = np.exp(logits)
                total = e.sum(axis=1, keepdims=True)
                rows, n = np.arange(len(x)), len(x)
                loss = float(np.log(total).mean() - logits[rows, labels].mean())
                d = e / (total * n)
                d[rows, labels] -= 1 / n
                for i in reversed(range(0, len(params), 2)):
                    a = acts.pop()
                    grads = (a.T @ d, d.sum(axis=0))
                    if i:
                        d = (d @ params[i].T) * dact(a)
                    for j, g in zip((i, i + 1), grads, strict=True):
                        velocity[j] *= MOMENTUM
                        velocity[j] += g
                        params[j] -= task["lr"] * velocity[j]
        return loss

    return run


def run_torch(task):
    torch = need("torch")
    layers = []
    for i in range(0, len(task["init"]), 2):
        linear = torch.nn.Linear(*task["init"][i].shape)
        with torch.no_grad():  # ours is x @ W, torch's x @ W.T: copy the transpose
            linear.weight.copy_(torch.from_numpy(task["init"][i].value.T.copy()))
            linear.bias.copy_(torch.from_numpy(task["init"][i + 1].value))
        layers += [linear, torch.nn.ReLU() if task["activation"] == "relu" else torch.nn.Tanh()]
    template = torch.nn.Sequential(*layers[:-1])
    batches = [[(torch.from_numpy(x), torch.from_numpy(y)) for x, y in e] for e in task["batches"]]

    def run():
        model = __import__("copy").deepcopy(template)
        opt = torch.optim.SGD(model.parameters(), lr=task["lr"], momentum=MOMENTUM)
        for epoch in batches:
            for x, labels in epoch:
                loss = torch.nn.functional.cross_entropy(model(x), labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return loss.item()

    return run


PEERS = {
    "numpy": run_numpy,
    COMPILED: run_autodiff(True),
    REBUILT: run_autodiff(False),
    "torch": run_torch,
}


def make_task(name, quick):
    if name == "xor":
        x, y = data.xor()
        task = dict(sizes=[2, 8, 2], activation="tanh", lr=0.5, batch=None, epochs=1000, x=x, y=y)
    else:
        x_train, y_train, _, _ = data.train_test_split(*data.digits(), seed=0)
        task = dict(
            sizes=[64, 128, 10],
            activation="relu",
            lr=0.05,
            batch=64,
            epochs=5,
            x=x_train,
            y=y_train,
        )
    if quick:
        task["epochs"] = max(1, task["epochs"] // 10)
    task["init"] = nn.MLP(task["sizes"], task["activation"], seed=0).parameters()
    task["batches"] = epochs_of_batches(task["x"], task["y"], task["batch"], task["epochs"])
    task["steps"] = sum(len(e) for e in task["batches"])
    return task


def bench(name, args):
    task = make_task(name, args.quick)
    print(
        f"\n== {name}: MLP {'-'.join(map(str, task['sizes']))} ({task['activation']}), "
        f"{task['steps']} steps: time per step =="
    )
    runs = {}
    for peer, factory in PEERS.items():
        try:
            runs[peer] = factory(task)
        except Skip as why:
            print(f"  {peer:<20} skipped: {why}")
    losses = {peer: run() for peer, run in runs.items()}
    for peer, loss in losses.items():
        if not np.isclose(loss, losses["numpy"], rtol=1e-3, atol=1e-4):
            print(f"  WARNING: {peer} ends at loss {loss:.6f}, NumPy at {losses['numpy']:.6f}")
    times = time_steps({p: (lambda r=r: (r(), [])) for p, r in runs.items()}, args.repeat, 0.5)
    med = {p: statistics.median(t) / task["steps"] * 1e6 for p, t in times.items()}
    print(
        f"  {'peer':<20}{'us/step':>10}{'final loss':>12}{'compiled/peer':>15}{'rebuilt/peer':>14}"
    )
    for peer in runs:
        print(
            f"  {peer:<20}{med[peer]:>10.1f}{losses[peer]:>12.5f}"
            f"{med[COMPILED] / med[peer]:>14.2f}x{med[REBUILT] / med[peer]:>13.2f}x"
        )
    return med


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved repeats")
    args = parser.parse_args()
    if args.quick:
        args.repeat = 2
    header()
    for name in ("xor", "digits"):
        bench(name, args)


if __name__ == "__main__":
    main()
