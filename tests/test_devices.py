"""Devices: the default device, mixing devices, and (where a GPU exists) the same ops,
gradients and training on CuPy, with memory that stays flat across steps."""

import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import autodiff as ad
from autodiff import backend
from strategies import OP_CASES, requires_gpu

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
        np.testing.assert_allclose(backend.to_numpy(out_gpu.value), out_cpu.value, rtol=1e-10)
        for g_gpu, g_cpu in zip(
            ad.gradients(out_gpu, gpu), ad.gradients(out_cpu, cpu), strict=True
        ):
            np.testing.assert_allclose(
                backend.to_numpy(g_gpu.value), g_cpu.value, rtol=1e-9, atol=1e-12
            )
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

    monkeypatch.setattr(backend, "_cupy", NoDevice)
    assert backend.available_devices() == ["cpu"]
    backend.synchronize()  # returns quietly instead of raising
