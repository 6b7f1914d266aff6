"""Devices: the default device, mixing devices, and (where a GPU exists) the same ops,
gradients and training on CuPy, with memory that stays flat across steps."""

import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import backend, data, nn, optim
from strategies import DEVICES, OP_CASES, assert_same_on_gpu, requires_gpu

OPS = sorted(name for name, cls in ad.Op.registry.items() if not cls.is_leaf)
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_default_device_is_cpu_and_the_context_restores_it():
    assert backend.get_default_device() == "cpu"
    with backend.using_device("cpu") as device:
        assert device == "cpu" and ad.tensor([1.0]).device == "cpu"
    assert backend.get_default_device() == "cpu"
    with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
        backend.set_default_device("tpu")


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed: the missing-CuPy messages cannot show")
def test_without_cupy_the_gpu_asks_for_the_gpu_extra():
    for attempt in (
        lambda: backend.set_default_device("gpu"),
        lambda: ad.tensor([1.0], device="gpu"),
        backend.memory_info,
    ):
        with pytest.raises(RuntimeError, match=r"pip install -e '\.\[gpu\]'"):
            attempt()
    assert backend.get_default_device() == "cpu"
    assert backend.available_devices() == ["cpu"]


def _fake_gpu_array():
    """An object that the backend takes for a CuPy array and that NumPy cannot combine
    with: enough to test the error path on a machine without a GPU."""

    def refuse(self, other):
        raise TypeError("Unsupported type <class 'numpy.ndarray'>")

    attrs = {"__module__": "cupy._core.core", "__add__": refuse, "__radd__": refuse}
    attrs.update(shape=(2,), ndim=1, dtype=np.dtype("float32"), __array_ufunc__=None)
    return type("ndarray", (), attrs)()


def test_mixing_devices_names_both_and_how_to_move():
    on_gpu = ad.tensor([0.0, 0.0])
    on_gpu.value = _fake_gpu_array()
    with pytest.raises(ad.DeviceError) as info:
        ad.tensor([1.0, 2.0]) + on_gpu
    message = str(info.value)
    assert "add" in message and "input 0 on cpu" in message and "input 1 on gpu" in message
    assert "to_device" in message


# -- on a GPU --------------------------------------------------------------------------------


@requires_gpu
def test_gpu_leaves_default_to_float32_and_arrays_keep_their_dtype():
    assert ad.tensor([1.0, 2.0], device="gpu").dtype == np.float32
    assert ad.tensor(np.ones(2), device="cuda").dtype == np.float64
    assert ad.tensor([1.0], device="gpu", dtype="float64").dtype == np.float64
    with backend.using_device("gpu"):
        x = ad.tensor([1.0, 2.0])
        assert x.device == "gpu" and (x * 2).device == "gpu"
    assert ad.tensor([1.0]).device == "cpu"


@requires_gpu
def test_mixing_real_devices_is_a_device_error():
    with pytest.raises(ad.DeviceError, match="different devices"):
        ad.tensor([1.0, 2.0]) * ad.tensor([1.0, 2.0], device="gpu")


@requires_gpu
def test_a_number_fed_to_a_gpu_graph_stays_a_weak_number():
    """Fed to a Variable, a Python number mixes with GPU arrays as one written in the
    graph does (it once became a 0-d NumPy float64 array, which CuPy refuses)."""
    x, y = ad.Variable("x"), ad.Variable("y")
    data = backend.to_device(np.array([1.0, 2.0], dtype=np.float32), "gpu")
    executor = ad.Executor([x * y, ad.sum(x) * y, ad.sum(y)])
    for number in (2.0, 3.0, 3.0):
        scaled, total, alone = executor.run({x: data, y: number})
        assert backend.device_of(scaled) == "gpu" and scaled.dtype == np.float32
        assert total.dtype == np.float32 and float(total) == 3 * number
        np.testing.assert_array_equal(backend.to_device(scaled, "cpu"), [number, 2 * number])
        assert float(alone) == number
    # with NumPy arrays beside it too, it goes where the GPU arrays are, in any order
    cpu = ad.Variable("cpu")
    mixed = ad.Executor([x * y, cpu * 2.0])
    ones = np.ones(2, dtype=np.float32)
    for feed in ({cpu: ones, x: data, y: 2.0}, {x: data, cpu: ones, y: 2.0}):
        scaled, _ = mixed.run(feed)
        assert backend.device_of(scaled) == "gpu" and scaled.dtype == np.float32
    with backend.using_device("gpu"):  # nothing beside: where ad.tensor(2.0) would go
        (alone,) = ad.Executor([y * y]).run({y: 2.0})
    assert backend.device_of(alone) == "gpu" and alone.dtype == np.float32


@requires_gpu
@pytest.mark.parametrize("name", OPS)
@given(data=st.data())
def test_every_op_on_the_gpu_matches_the_cpu(name, data):
    case = data.draw(OP_CASES[name])
    cpu = [ad.tensor(a) for a in case.args]
    out_cpu = case.fn(*cpu)
    with backend.using_device("gpu"):  # constants made inside case.fn go to the GPU too
        gpu = [ad.tensor(a, device="gpu") for a in case.args]  # float64, as on the CPU
        out_gpu = case.fn(*gpu)
        assert out_gpu.device == "gpu"
        assert_same_on_gpu(out_gpu, out_cpu, name)
        if not ad.Op.registry[name].differentiable:  # comparisons: values only, no gradients
            assert out_gpu.dtype == out_cpu.dtype
            with pytest.raises(ad.DTypeError, match=f"{name} is not differentiable"):
                ad.gradients(out_gpu, gpu)
            return
        for g_gpu, g_cpu in zip(
            ad.gradients(out_gpu, gpu), ad.gradients(out_cpu, cpu), strict=True
        ):
            assert_same_on_gpu(g_gpu, g_cpu, f"the gradient of {name}")
        args32 = [backend.to_device(a.astype(np.float32), "gpu") for a in case.args]
        ad.check_grads(case.fn, args32, order=1)  # float32: the named looser tolerances


@requires_gpu
def test_gpu_memory_stays_flat_while_graphs_are_rebuilt():
    from autodiff import data, nn, optim

    x, y = data.digits()
    model = nn.MLP([64, 256, 10], device="gpu", seed=0)
    opt = optim.SGD(model.parameters(), lr=0.01)
    xb, yb = backend.to_device(x[:256], "gpu"), backend.to_device(y[:256], "gpu")

    def steps(n):
        for _ in range(n):
            loss = nn.cross_entropy(model(ad.constant(xb)), ad.constant(yb))
            opt.step(ad.gradients(loss, model.parameters()))

    steps(50)  # warm up the pool
    held = backend.memory_info()["held_bytes"]
    steps(2000)
    assert backend.memory_info()["held_bytes"] <= held * 1.05 + 2**20


def test_synchronize_is_a_no_op_with_cupy_but_no_gpu(monkeypatch):
    class NoDevice:
        class cuda:
            class runtime:
                @staticmethod
                def getDeviceCount():
                    raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device")

            class Device:
                def synchronize(self):
                    raise AssertionError("synchronize must not touch a missing GPU")

    monkeypatch.setattr(ad.core.backend, "_cupy", NoDevice)
    assert backend.available_devices() == ["cpu"]
    assert "no CUDA-capable device" in backend.gpu_problem()
    backend.synchronize()  # returns quietly instead of raising


def test_a_gpu_counts_once_a_kernel_has_compiled_and_run(monkeypatch):
    """A device and a driver are not enough: CuPy compiles its kernels with NVRTC, which
    a CuPy wheel without the CUDA libraries lacks. The reason is given in words."""

    class NoCompiler:
        class cuda:
            class runtime:
                getDeviceCount = staticmethod(lambda: 1)

        @staticmethod
        def arange(*args, **kwargs):
            raise RuntimeError("CuPy failed to load libnvrtc.so.12")

    monkeypatch.setattr(ad.core.backend, "_cupy", NoCompiler)
    monkeypatch.setattr(backend, "_kernel_problem", None)
    assert backend.available_devices() == ["cpu"]
    problem = backend.gpu_problem()
    assert "could not compile (with NVRTC)" in problem and "libnvrtc.so.12" in problem
    assert "pip install -e '.[gpu]'" in problem


# -- every device (the GPU through CuPy, or its double: AUTODIFF_FAKE_GPU=1 pytest -m gpu) ----


def on(device, array):
    return backend.to_device(np.asarray(array, dtype=np.float32), device)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_runs_on_each_device(device):
    from autodiff import forward

    x, v = on(device, [0.5, 1.0, 2.0]), on(device, [1.0, 0.0, -1.0])

    def f(a):
        return forward.sin(a) * a

    value, tangent = forward.jvp(f, x, v)
    jac = forward.jacobian(f, x)
    assert {backend.device_of(a) for a in (value, tangent, jac)} == {device}
    xs, vs = backend.to_numpy(x), backend.to_numpy(v)
    np.testing.assert_allclose(backend.to_numpy(tangent), (np.cos(xs) * xs + np.sin(xs)) * vs, 1e-6)
    np.testing.assert_allclose(
        backend.to_numpy(jac), np.diag(np.cos(xs) * xs + np.sin(xs)), rtol=1e-6
    )
    assert value.dtype == tangent.dtype == jac.dtype == np.float32


@pytest.mark.parametrize("device", DEVICES)
def test_graphs_on_each_device_are_drawn_with_their_values(device):
    x = ad.tensor(on(device, [1.0, 2.0]), name="x")
    y = (ad.sin(x) * x).sum()
    drawing = ad.viz.draw(y).source  # labels read the values from the device
    assert "= [0.8415, 1.819]" in drawing and "= 2.66" in drawing
    picture = ad.viz.side_by_side(y, [x]).source
    assert "= [1.382, 0.077]" in picture  # the gradient node: cos(x) x + sin(x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "make", [lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.Adam(p, lr=0.1)]
)
def test_optimisers_take_the_same_steps_on_each_device(device, make):
    start, grads = np.array([1.0, -2.0, 3.0]), [np.array([0.5, 0.5, -1.0]), np.array([1, 0, 2.0])]
    reference, moved = ad.tensor(start), ad.tensor(on(device, start))
    ref_opt, opt = make([reference]), make([moved])
    for g in grads:
        ref_opt.step([g])
        opt.step([on(device, g)])
    assert backend.device_of(moved.value) == device and moved.dtype == np.float32
    np.testing.assert_allclose(backend.to_numpy(moved.value), reference.value, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_rebuilt_training_and_accuracy_on_each_device(device):
    x, y = data.xor()
    model = nn.MLP([2, 8, 2], activation="tanh", device=device, seed=0)
    opt = optim.Adam(model.parameters(), lr=0.05)
    history = nn.train(
        model, nn.cross_entropy, opt, x, y, epochs=150, progress=False, compiled=False
    )
    assert history.loss[-1] < history.loss[0] / 4
    assert nn.accuracy(model, x, y) == 1.0


def test_the_cupy_double_refuses_what_cupy_refuses():
    """tests/shared/fakecupy.py must fail where CuPy fails, or the -m gpu run proves nothing."""
    import fakecupy

    gpu = fakecupy.asarray(np.ones(3, dtype=np.float32))
    assert type(gpu).__module__.startswith("cupy") and backend.device_of(gpu) == "gpu"
    for mistake in (
        lambda: np.asarray(gpu),  # an implicit copy to the host
        lambda: np.array([gpu[0], gpu[1]]),
        lambda: gpu + np.ones(3),  # CuPy and NumPy arrays in one op
        lambda: fakecupy.add(gpu, np.ones(3)),
    ):
        with pytest.raises(TypeError):
            mistake()
    assert isinstance(np.exp(gpu), fakecupy.ndarray)  # NumPy functions dispatch to "CuPy"
    assert isinstance(gpu.sum(), fakecupy.ndarray)  # reductions stay on the device
    np.testing.assert_array_equal((gpu * 2 + np.float32(1)).get(), [3, 3, 3])
    used = fakecupy.get_default_memory_pool().used_bytes()
    extra = fakecupy.zeros(1000, dtype=np.float64)
    assert fakecupy.get_default_memory_pool().used_bytes() == used + 8000
    del extra
    assert fakecupy.get_default_memory_pool().used_bytes() == used


def test_the_cupy_double_has_what_cupy_14_has_and_nothing_more():
    """Names, keywords and fusion as CuPy 14.2 has them (tests/shared/cupy_api.json was written by
    CuPy itself on a GPU): the double is neither more permissive nor stricter."""
    import fakecupy

    gpu = fakecupy.asarray(np.ones(3, dtype=np.float32))
    with pytest.raises(AttributeError, match="no attribute 'vecdot'"):
        fakecupy.vecdot  # noqa: B018 (NumPy 2 has it, CuPy 14.2 does not)
    for refused in (
        lambda: gpu.max(initial=0),  # CuPy's reductions take neither initial= nor where=
        lambda: fakecupy.max(gpu, initial=0),
        lambda: fakecupy.add(gpu, 1, where=gpu > 0),  # nor its ufuncs where=
        lambda: fakecupy.fuse(kernel_name="k")(lambda x: x * 2 if x else x)(gpu),  # bool()
        lambda: fakecupy.fuse(kernel_name="k")(lambda x: x.reshape(x.shape))(gpu),  # no shape
        lambda: fakecupy.fuse(kernel_name="k")(lambda x: fakecupy.sum(x))(gpu),  # a reduction
    ):
        with pytest.raises((TypeError, AttributeError, Exception)):
            refused()
    kernel = fakecupy.fuse(kernel_name="k")(lambda x, y: fakecupy.where(x > 0, x * y, -x))
    np.testing.assert_array_equal(kernel(gpu, 2.0).get(), [2, 2, 2])
    assert kernel(gpu, 2.0).dtype == np.float32  # NEP 50: a Python float is weak
    # What CuPy accepts and an over-strict double refused:
    node = ad.tensor(np.ones(3, np.float32))  # (gpu * node: the Node's __rmul__ decides)
    assert gpu.__mul__(node) is NotImplemented and gpu.__lt__(node) is NotImplemented
    np.testing.assert_array_equal((gpu < np.asarray(2.0)).get(), [True] * 3)  # 0-d NumPy
    for arithmetic in (lambda: gpu * np.asarray(0.1), lambda: np.asarray(1) + gpu):
        with pytest.raises(TypeError, match="Unsupported type"):  # (CuPy 14.2, an H200)
            arithmetic()
    assert (gpu * np.float64(0.1)).dtype == np.float64  # a NumPy scalar is strong
    draws = fakecupy.random.default_rng(0).random(4)
    assert isinstance(draws, fakecupy.ndarray) and draws.shape == (4,)


@requires_gpu
def test_the_gpu_benchmark_runs(capsys, monkeypatch):
    """benchmarks/bench_gpu.py, small (timings are not checked, only that every part runs
    and the fused kernels compiled): GPU time is scarce, a crash there wastes it."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[2] / "benchmarks" / "bench_gpu.py"
    spec = importlib.util.spec_from_file_location("bench_gpu", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = ["bench_gpu.py", "--quick", "--width", "64"]
    if importlib.util.find_spec("torch") is None or not __import__("torch").cuda.is_available():
        args.append("--no-torch")  # PyTorch's side needs CUDA (the double has none)
    monkeypatch.setattr("sys.argv", args)
    bench.main()
    out = capsys.readouterr().out
    for row in ("autodiff compiled", "autodiff fused", "autodiff rebuilt", "after 1000 steps"):
        assert row in out
    assert "'failed': 0" in out and "'kernels': 0" not in out


@requires_gpu
def test_out_of_range_labels_on_the_gpu_are_nan_and_raise_at_the_next_read():
    """The label check on the GPU does not wait for the GPU: the loss and gradient are NaN
    at once, and the next read of a value by the host raises the check's error, once."""
    logits = ad.tensor(np.zeros((3, 4), "float32"), device="gpu")
    labels = ad.constant(backend.to_device(np.array([0, 4, 1]), "gpu"))
    loss = ad.softmax_cross_entropy(logits, labels)  # built and run: no error yet
    (grad,) = ad.gradients(loss, [logits])
    with pytest.raises(ad.DomainError, match=r"class indices must lie in \[0, 4\).*GPU"):
        loss.numpy()
    assert np.isnan(loss.numpy()) and np.isnan(grad.numpy()).all()  # raised only once
    good = ad.softmax_cross_entropy(
        logits, ad.constant(backend.to_device(np.array([0, 3, 1]), "gpu"))
    )
    assert float(good.numpy()) == pytest.approx(np.log(4), rel=1e-6)
    ad.softmax_cross_entropy(logits, labels)
    with pytest.raises(ad.DomainError, match="class indices"):
        backend.synchronize()


def _syncs_in_training(model, epochs, batch_size, compiled):
    import fakecupy

    x, y = data.digits()
    before = fakecupy.syncs
    opt = optim.Adam(model.parameters(), lr=0.001)
    nn.train(
        model,
        nn.cross_entropy,
        opt,
        x[:256],
        y[:256],
        epochs=epochs,
        batch_size=batch_size,
        progress=False,
        compiled=compiled,
    )
    return fakecupy.syncs - before


@requires_gpu
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "rebuilt"])
def test_a_training_step_never_waits_for_the_gpu(compiled):
    """Reads of device values by the host (each a sync in CuPy) happen once per epoch,
    where nn.train reads the epoch's losses, never per step: counted by the double."""
    if backend.namespace(ad.tensor([0.0], device="gpu").value).__name__ != "fakecupy":
        pytest.skip("the sync counter is the CuPy double's (AUTODIFF_FAKE_GPU=1)")

    def cnn():
        return nn.Sequential(
            lambda v: ad.reshape(v, (-1, 1, 8, 8)),
            nn.Conv2d(1, 4, 3, padding=1, device="gpu"),
            nn.BatchNorm(4, device="gpu"),
            ad.relu,
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64, 10, device="gpu"),
        )

    for model in (nn.MLP([64, 16, 10], device="gpu"), cnn()):
        few = _syncs_in_training(model, epochs=2, batch_size=128, compiled=compiled)
        many = _syncs_in_training(model, epochs=2, batch_size=16, compiled=compiled)
        assert few == many <= 2 * 2, f"{few} syncs for 4 steps, {many} for 32"
