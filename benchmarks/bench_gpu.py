"""autodiff on the GPU (CuPy) next to PyTorch on the same GPU, in one run.

    python benchmarks/bench_gpu.py             # needs CuPy, PyTorch with CUDA, and a GPU
    python benchmarks/bench_gpu.py --quick
    python benchmarks/bench_gpu.py --quick --no-torch   # autodiff alone

* ``mlp``: one training step (forward, backward, SGD) of MLP 784-1024-1024-10, batch 256,
  and of MLP 4096-4096-4096-10, batch 4096; float32, ReLU, softmax cross-entropy. Target:
  autodiff within 1.2x of PyTorch. Compiled (one graph, run per step) with and without
  fusion, captured (the compiled run recorded as CUDA graphs, replayed: capture.py), and
  rebuilt every step (define-by-run).
* ``cnn``: one training step of a small CNN on 28x28 images, batch 128 (conv 1->32,
  ReLU, max-pool, conv 32->64, ReLU, max-pool, linear 3136->10), against PyTorch (cuDNN).
* ``plan``: the CuPy pool's peak of live bytes during one compiled MLP step (after a warm
  one), without and with a memory plan, next to what the plan says (``plan.peak_bytes``).
* ``fusion``: value and gradient of an elementwise formula on 2**24 float32 numbers,
  where fusion matters most: ops one kernel each, fused (``Executor(fuse=True)``), PyTorch.
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


def autodiff_mlp_step(sizes, batch, compiled=True, fuse=False, capture=False):
    model = nn.MLP(sizes, device="gpu", seed=0)
    return autodiff_step(model, (sizes[0],), sizes[-1], batch, compiled, fuse, capture)


def autodiff_cnn_step(batch, compiled=True, fuse=False, capture=False):
    return autodiff_step(cnn(), (1, 28, 28), 10, batch, compiled, fuse, capture)


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, device="gpu"),
        ad.relu,
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, device="gpu", seed=1),
        ad.relu,
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 10, device="gpu", seed=2),
    )


def training_graph(model, example_shape, classes, batch):
    """A fixed random batch on the GPU, and the loss and parameter gradients of ``model``
    built once from placeholders: (outputs, feed, (x, y))."""
    xp = backend.namespace(model.parameters()[0].value)
    x = xp.random.standard_normal((batch, *example_shape), dtype="float32")
    y = xp.random.randint(0, classes, batch)
    xv = ad.Variable("x", shape=(None, *example_shape), dtype="float32")
    yv = ad.Variable("y", shape=(None,), dtype=y.dtype)
    loss = nn.cross_entropy(model(xv), yv)
    return [loss, *ad.gradients(loss, model.parameters())], {xv: x, yv: y}, (x, y)


def autodiff_step(model, example_shape, classes, batch, compiled=True, fuse=False, capture=False):
    """One SGD step of ``model`` on a fixed random batch, on the GPU."""
    opt = optim.SGD(model.parameters(), lr=0.01)
    outputs, feed, (x, y) = training_graph(model, example_shape, classes, batch)
    if compiled:
        executor = ad.Executor(outputs, fuse=fuse, capture=capture)

        def step():
            _, *grads = executor.run(feed)
            opt.step(grads)

        step.executor = executor
        return step

    def rebuilt_step():
        loss = nn.cross_entropy(model(ad.constant(x)), ad.constant(y))
        opt.step(ad.gradients(loss, model.parameters()))

    return rebuilt_step


def torch_mlp_step(sizes, batch):
    import torch

    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch_step(torch.nn.Sequential(*layers[:-1]), (sizes[0],), sizes[-1], batch)


def torch_cnn_step(batch):
    from torch import nn as tnn

    model = tnn.Sequential(
        tnn.Conv2d(1, 32, 3, padding=1),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Conv2d(32, 64, 3, padding=1),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Flatten(),
        tnn.Linear(64 * 7 * 7, 10),
    )
    return torch_step(model, (1, 28, 28), 10, batch)


def torch_step(model, example_shape, classes, batch):
    import torch

    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, *example_shape, device="cuda")
    y = torch.randint(0, classes, (batch,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, torch.cuda.synchronize


def timed(step, sync, number):
    """Seconds per call of ``step``, over ``number`` calls ended by a synchronisation."""
    start = time.perf_counter()
    for _ in range(number):
        step()
    sync()
    return (time.perf_counter() - start) / number


# The kit's ways of running a step: (compiled, fuse, capture) for autodiff_step.
WAYS = {
    "autodiff compiled": (True, False, False),
    "autodiff fused": (True, True, False),
    "autodiff captured": (True, False, True),
    "autodiff fused+capt": (True, True, True),
    "autodiff rebuilt": (False, False, False),
}


def compare_steps(args, make_step, torch_step):
    """Time ``make_step(compiled, fuse, capture)`` each way next to PyTorch's step."""
    peers = {name: (make_step(*way), backend.synchronize) for name, way in WAYS.items()}
    if args.torch:
        peers["torch cuda"] = torch_step()
    report(peers, args, "ms", 1e3)
    print(f"  captured: {peers['autodiff captured'][0].executor.capture_report}")


def bench_mlp(args):
    for sizes, batch in (((784, 1024, 1024, 10), 256), ((args.width,) * 3 + (10,), args.width)):
        print(f"\n== MLP {'-'.join(map(str, sizes))}, batch {batch}, float32: ms per step ==")
        compare_steps(
            args,
            lambda *way, s=sizes, b=batch: autodiff_mlp_step(s, b, *way),
            lambda s=sizes, b=batch: torch_mlp_step(s, b),
        )


def bench_cnn(args):
    batch = 16 if args.quick else 128
    print(f"\n== CNN on 28x28 images, batch {batch}, float32: ms per step ==")
    compare_steps(args, lambda *way: autodiff_cnn_step(batch, *way), lambda: torch_cnn_step(batch))


def bench_plan(args):
    """The pool's peak of live bytes in one compiled step, unplanned and planned."""
    import cupy

    if not hasattr(cupy.cuda, "MemoryHook"):  # the CuPy double of the tests has none
        print("\n== pool peak: skipped (this CuPy has no memory hooks) ==")
        return

    class Peak(cupy.cuda.MemoryHook):
        name = "autodiff-peak"

        def __init__(self):
            self.live = self.peak = 0

        def malloc_postprocess(self, **kw):
            self.live += kw["mem_size"]
            self.peak = max(self.peak, self.live)

        def free_postprocess(self, **kw):
            self.live -= kw["mem_size"]

    sizes, batch = (784, 1024, 1024, 10), 256
    print(f"\n== pool peak in a compiled step, MLP {'-'.join(map(str, sizes))}, batch {batch} ==")
    model = nn.MLP(sizes, device="gpu", seed=0)
    outputs, feed, _ = training_graph(model, (sizes[0],), sizes[-1], batch)
    memory_plan = ad.memory.plan(outputs, feed)
    for label, plan in (("unplanned", None), ("planned", memory_plan)):
        backend.synchronize()
        executor = ad.Executor(outputs, plan)
        executor.run(feed)  # warm: kernels compiled (its results dropped)
        backend.synchronize()
        with Peak() as hook:  # one step: its buffers, CuPy's temporaries, the outputs
            results = executor.run(feed)
            backend.synchronize()
        out = sum(int(r.nbytes) for r in results)
        print(
            f"  {label:<10} pool peak {hook.peak / 2**20:8.2f} MiB in one step"
            f" (the outputs alone {out / 2**20:.2f} MiB)"
        )
        del executor, results
    print(
        f"  the plan says {memory_plan.peak_bytes / 2**20:.2f} MiB planned,"
        f" {memory_plan.naive_bytes / 2**20:.2f} MiB with every value kept"
    )


def report(peers, args, unit, scale):
    """Time the peers interleaved (they take turns), print medians and ratios."""
    for step, sync in peers.values():  # warm up: kernels compile, pools fill, graphs record
        step()
        step()
        sync()
    times = {name: [] for name in peers}
    for _ in range(args.repeat):
        for name, (step, sync) in peers.items():
            times[name].append(timed(step, sync, args.number))
    med = {name: statistics.median(t) * scale for name, t in times.items()}
    base = "torch cuda" if "torch cuda" in med else next(iter(med))
    for name in peers:
        print(f"  {name:<20}{med[name]:>10.3f} {unit}   {med[name] / med[base]:.2f}x {base}")


def formula(xp_or_ad, x):
    """The elementwise formula of the fusion benchmark, for autodiff or torch."""
    return (xp_or_ad.tanh(x) * xp_or_ad.sigmoid(x) + xp_or_ad.sin(x) * x).sum()


def bench_fusion(args):
    n = 2**20 if args.quick else 2**24
    print(f"\n== elementwise formula and its gradient on {n} float32 numbers: us per run ==")
    xp = backend.namespace(ad.tensor([0.0], device="gpu").value)
    x_value = xp.random.standard_normal(n, dtype="float32")
    x = ad.Variable("x", shape=(n,), dtype="float32")
    y = formula(ad, x)
    outputs = [y, *ad.gradients(y, [x])]
    peers = {}
    for name, fuse in (("autodiff unfused", False), ("autodiff fused", True)):
        executor = ad.Executor(outputs, fuse=fuse)
        peers[name] = (lambda e=executor: e.run({x: x_value}), backend.synchronize)
    if args.torch:
        import torch

        xt = torch.as_tensor(x_value, device="cuda").requires_grad_()

        def torch_step():
            (grad,) = torch.autograd.grad(formula(torch, xt), [xt])
            return grad

        peers["torch cuda"] = (torch_step, torch.cuda.synchronize)
    report(peers, args, "us", 1e6)
    print(f"  fused kernels: {ad.fusion.kernel_counts()}")


def bench_xor(args):
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
    if not args.torch:
        print(f"  autodiff {ours:.0f} us")
        return
    import torch

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
    parser.add_argument("--no-torch", dest="torch", action="store_false", help="autodiff alone")
    parser.add_argument("--width", type=int, default=4096, help="MLP width and batch size")
    args = parser.parse_args()
    args.repeat, args.number = (3, 2) if args.quick else (11, 5)
    if "gpu" not in backend.available_devices():
        raise SystemExit("bench_gpu: no GPU here (CuPy and a CUDA device are needed).")
    bench_mlp(args)
    bench_cnn(args)
    bench_plan(args)
    bench_fusion(args)
    bench_xor(args)
    bench_memory(args)


if __name__ == "__main__":
    main()
