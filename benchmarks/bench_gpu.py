"""autodiff on the GPU (CuPy) next to PyTorch on the same GPU, in one run.

    python benchmarks/bench_gpu.py             # needs CuPy, PyTorch with CUDA, and a GPU
    python benchmarks/bench_gpu.py --quick

* ``mlp``: one training step (forward, backward, SGD) of MLP 4096-4096-4096-10, batch
  4096, float32, ReLU, softmax cross-entropy. Target: autodiff within 1.2x of PyTorch.
* ``xor``: 1000 steps of the XOR loop (MLP 2-8-2), where launch overhead dominates.
* ``memory``: CuPy pool bytes after 10, 100 and 1000 rebuilt-graph steps (must stay flat).

Times are medians over interleaved repeats, each ended by a device synchronisation.
"""

from __future__ import annotations

import argparse
import statistics
import time

import autodiff as ad
from autodiff import backend, data, nn, optim


def autodiff_mlp_step(sizes, batch, compiled=True):
    model = nn.MLP(sizes, device="gpu", seed=0)
    opt = optim.SGD(model.parameters(), lr=0.01)
    xp = backend.namespace(model.parameters()[0].value)
    x = xp.random.standard_normal((batch, sizes[0]), dtype="float32")
    y = xp.random.randint(0, sizes[-1], batch)
    params = model.parameters()
    if compiled:
        xv = ad.Variable("x", shape=(None, sizes[0]), dtype="float32")
        yv = ad.Variable("y", shape=(None,), dtype=y.dtype)
        loss = nn.cross_entropy(model(xv), yv)
        executor = ad.Executor([loss, *ad.gradients(loss, params)])

        def step():
            _, *grads = executor.run({xv: x, yv: y})
            opt.step(grads)

        return step

    def rebuilt_step():
        loss = nn.cross_entropy(model(ad.constant(x)), ad.constant(y))
        opt.step(ad.gradients(loss, params))

    return rebuilt_step


def torch_mlp_step(sizes, batch):
    import torch

    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, sizes[0], device="cuda")
    y = torch.randint(0, sizes[-1], (batch,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, torch.cuda.synchronize


def timed(step, sync, repeat, number):
    step()
    sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            step()
        sync()
        times.append((time.perf_counter() - start) / number)
    return times


def bench_mlp(args):
    sizes, batch = (4096, 4096, 4096, 10), 4096
    print(f"\n== MLP {'-'.join(map(str, sizes))}, batch {batch}, float32: ms per step ==")
    peers = {
        "autodiff compiled": (autodiff_mlp_step(sizes, batch, True), backend.synchronize),
        "autodiff rebuilt": (autodiff_mlp_step(sizes, batch, False), backend.synchronize),
        "torch cuda": torch_mlp_step(sizes, batch),
    }
    times = {name: [] for name in peers}
    for _ in range(args.repeat):  # interleaved: peers take turns
        for name, (step, sync) in peers.items():
            times[name] += timed(step, sync, 1, args.number)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    for name in peers:
        print(f"  {name:<20}{med[name]:>9.3f} ms   {med[name] / med['torch cuda']:.2f}x torch")


def bench_xor(args):
    import torch

    x, y = data.xor()
    steps = 100 if args.quick else 1000
    print(f"\n== XOR, MLP 2-8-2, {steps} steps on the GPU: us per step ==")
    model = nn.MLP([2, 8, 2], "tanh", device="gpu", seed=0)
    start = time.perf_counter()
    nn.train(
        model,
        nn.cross_entropy,
        optim.SGD(model.parameters(), lr=0.5, momentum=0.9),
        x,
        y,
        epochs=steps,
        progress=False,
    )
    backend.synchronize()
    ours = (time.perf_counter() - start) / steps * 1e6
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
    xt, yt = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    start = time.perf_counter()
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    theirs = (time.perf_counter() - start) / steps * 1e6
    print(f"  autodiff {ours:.0f} us, torch {theirs:.0f} us: {ours / theirs:.2f}x torch")


def bench_memory(args):
    print("\n== CuPy pool while rebuilding the graph every step (MLP 64-256-10, batch 256) ==")
    step = autodiff_mlp_step((64, 256, 10), 256, compiled=False)
    done = 0
    for checkpoint in (10, 100, 1000):
        for _ in range(checkpoint - done):
            step()
        done = checkpoint
        backend.synchronize()
        info = backend.memory_info()
        print(
            f"  after {checkpoint:>4} steps: used {info['used_bytes'] / 2**20:8.1f} MiB, "
            f"held {info['held_bytes'] / 2**20:8.1f} MiB"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    args.repeat, args.number = (3, 2) if args.quick else (11, 5)
    if "gpu" not in backend.available_devices():
        raise SystemExit("bench_gpu: no GPU here (CuPy and a CUDA device are needed).")
    bench_mlp(args)
    bench_xor(args)
    bench_memory(args)


if __name__ == "__main__":
    main()
