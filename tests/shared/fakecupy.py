"""A stand-in for CuPy, so that the GPU code paths run (and fail) where there is no GPU.

CI has no GPU, and the sessions that write this kit mostly have none either: without a
double, every ``if device == "gpu"`` path and every op on CuPy arrays would first run on
a student's GPU. This module copies the behaviour of CuPy that trips NumPy code:

* its arrays are a different type, from a module whose name starts with ``cupy``
  (that is how ``autodiff.backend`` tells the devices apart);
* an array never turns into a NumPy array by itself: ``numpy.asarray(gpu_array)``
  raises ``TypeError``, as in CuPy; ``.get()`` copies it to the host explicitly;
* integer indices out of range wrap around in ``take_along_axis``, as in CuPy (NumPy
  raises ``IndexError``);
* CuPy functions refuse NumPy arrays (``cupy.add(gpu, cpu)`` raises ``TypeError``);
  NumPy scalars and Python numbers are fine;
* NumPy functions called on a CuPy array dispatch to CuPy (``__array_ufunc__``,
  ``__array_function__``), and return CuPy arrays;
* an input that shares memory with ``out=`` without being that very array is copied
  first (counted in ``overlap_copies``), as CuPy does; NumPy writes through it;
* every read of a value back to the host (``.get()``, ``bool()``, ``float()``,
  ``int()``, ``.item()``, ``.tolist()``, ``repr``) waits for the GPU: a sync. The double
  counts them in ``syncs`` (``fakecupy.syncs``), so that tests can prove a training step
  never waits;
* a memory pool (``get_default_memory_pool``), ``cuda.runtime.getDeviceCount``,
  ``cuda.Device().synchronize``; pools of one's own (``cuda.MemoryPool``,
  ``cuda.using_allocator``);
* stream capture (CUDA graphs), as CuPy 14.2 does it: while a stream records, kernels
  are recorded, not run (an output holds garbage, NaN, until the graph is launched; an
  array written into keeps its values), and a launch runs them again on the very
  buffers they read and wrote. What CuPy refuses while recording is refused: cuBLAS
  (``NotImplementedError``, as CuPy raises) and any wait for the GPU (it breaks the
  recording, and ``end_capture`` raises). ``launches`` counts what the host launches:
  a kernel outside a graph, or a graph;
* only what CuPy 14.2 has: its module and array names and its functions' keywords, as
  CuPy itself listed them on a GPU (``cupy_api.json``); no ``where=`` on ufuncs, no
  ``initial=``/``where=`` on reductions. NumPy 2's promotion rules, which CuPy 14
  follows too (NEP 50);
* ``fuse`` traces the function once per input dtypes with stand-ins that have a dtype
  and ndim but no shape and refuse ``bool()``, as CuPy's tracer does, so a program CuPy
  could not fuse fails here too; then it runs the function for the values;
* a 0-d NumPy array in arithmetic is refused (``gpu * numpy.asarray(0.1)``: TypeError
  "Unsupported type", as CuPy 14.2 raised on an H200), NumPy scalars (``numpy.float64``)
  are strong (float32 times one is float64);
* no stricter than CuPy: 0-d NumPy arrays mix into comparisons, an operand whose
  ``__array_ufunc__`` is None (a Node) gets its reflected operator, and
  ``random.default_rng`` draws device arrays.

Values are computed by NumPy, so a test against this double checks the code paths and
dtypes, not CUDA's arithmetic. ``AUTODIFF_FAKE_GPU=1 pytest -m gpu`` (``make test`` runs
it) installs it as ``cupy`` before the tests are collected (conftest.py).
"""

from __future__ import annotations

import contextlib
import functools
import json
import pathlib
import weakref
from types import SimpleNamespace

import numpy

# What CuPy 14.2 has: its public names (module, ndarray, random, cuda, stride_tricks) and
# the keywords of its functions where Python can read them, written out on a real GPU by
# CuPy itself (2026-11-25, an H100). A name or keyword not there raises, as in CuPy.
API = json.loads((pathlib.Path(__file__).with_name("cupy_api.json")).read_text())
UFUNC_KEYWORDS = {"out", "dtype", "casting"}  # no where= (CuPy 14.2: "Wrong arguments")
NO_REDUCTION_KEYWORDS = {"initial", "where"}  # a.max(initial=0): CuPy has neither

__version__ = "0.0-double"
syncs = 0  # reads of device values by the host: each one waits for the GPU in CuPy
overlap_copies = 0  # inputs copied because they overlap ``out`` without being it
launches = 0  # kernels launched by the host one by one, and CUDA graphs launched
BLAS = {"matmul", "dot", "tensordot", "einsum", "inner", "vdot"}  # cuBLAS in CuPy


class CUDARuntimeError(RuntimeError):
    """CuPy's ``cupy_backends.cuda.api.runtime.CUDARuntimeError``."""


def _sync() -> None:
    global syncs
    syncs += 1
    _refuse_while_recording("operation not permitted when stream is capturing")


def _from_host() -> None:
    """A copy from the host: refused while recording, as a wait is (no sync counted)."""
    _refuse_while_recording("a copy from pageable host memory while capturing")


def _refuse_while_recording(what: str) -> None:
    """CUDA: a wait (or a copy from the host) inside a capture breaks it."""
    if _recording is not None:
        _recording.broken = True
        raise CUDARuntimeError(f"cudaErrorStreamCaptureUnsupported: {what}")


# -- stream capture: kernels recorded as closures over their buffers, run at each launch --

_recording = None  # while a stream records: its kernels, and whether a wait broke it


COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}


def _refuse_0d_arrays(ufunc, inputs) -> None:
    """CuPy 14.2 takes a 0-d NumPy array in a comparison, not in arithmetic (measured)."""
    if ufunc.__name__ not in COMPARISONS:
        for x in inputs:
            if type(x) is numpy.ndarray:
                raise TypeError(f"Unsupported type {type(x)}")


def _refuse_blas(name: str) -> None:
    if _recording is not None and name in BLAS:  # CuPy 14.2's check, in cublas.setStream
        raise NotImplementedError(
            "calling cuBLAS API during stream capture is currently unsupported"
        )


def _kernel(run, inputs=(), out=None):
    """Run one kernel (``run()`` gives its NumPy result); while a stream records, record
    it: its output then holds garbage, and an array it writes into keeps its values."""
    global launches
    if _recording is None:
        launches += 1
        return run()
    before = None if out is None else out.copy()
    result = run()
    if isinstance(result, numpy.generic):  # the 0-d array a launch writes into
        result = numpy.asarray(result)
    _recording.kernels.append((run, result, out))
    if before is not None:
        numpy.copyto(out, before)
    elif not any(_shares(result, x) for x in inputs):  # (a view of an input: no kernel)
        _poison(result)
    return result


def _shares(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return any(_shares(x, b) for x in a)
    if isinstance(b, (tuple, list)):
        return any(_shares(a, x) for x in b)
    return (
        isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray) and numpy.shares_memory(a, b)
    )


def _poison(result) -> None:
    if isinstance(result, (tuple, list)):
        for r in result:
            _poison(r)
    elif isinstance(result, numpy.ndarray) and result.size and result.flags.writeable:
        kind = result.dtype.kind
        if kind in "fc":
            result.fill(numpy.nan)
        elif kind in "iu":  # (0: an index that CuPy would not check either)
            result.fill(0)


def _write_back(result, new) -> None:
    """A launch: the kernel's new result into the buffer the recording gave out."""
    if isinstance(result, (tuple, list)):
        for r, n in zip(result, new, strict=True):
            _write_back(r, n)
    elif isinstance(result, numpy.ndarray) and not _shares(result, numpy.asarray(new)):
        numpy.copyto(result, new)


class _Graph:
    """``cupy.cuda.Graph``: a recording; ``launch()`` runs its kernels again."""

    def __init__(self, kernels):
        self._kernels = kernels

    def launch(self, stream=None):
        global launches
        launches += 1
        for run, result, out in self._kernels:
            new = run()
            if out is None:
                _write_back(result, new)


def _unwrap(value):
    """NumPy values for NumPy to compute on; a NumPy array here is a device mix-up."""
    if isinstance(value, ndarray):
        return value._array
    if isinstance(value, numpy.ndarray) and value.ndim:  # 0-d: a scalar to CuPy too
        raise TypeError(f"Unsupported type {type(value)}")
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    return value


def _wrap(value):
    if isinstance(value, numpy.ndarray):
        return ndarray(value)
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    if isinstance(value, numpy.generic):  # CuPy reductions return 0-d arrays, not scalars
        return ndarray(numpy.asarray(value))
    return value


def _apart_from(out, inputs):
    """The inputs, with a copy of each one that shares memory with ``out`` without being
    the same array object: CuPy copies those before it writes (NumPy does not)."""
    global overlap_copies
    if not isinstance(out, ndarray):
        return inputs
    apart = []
    for x in inputs:
        if isinstance(x, ndarray) and x is not out and numpy.shares_memory(x._array, out._array):
            overlap_copies += 1
            x = ndarray(_kernel(x._array.copy, [x._array]))
        apart.append(x)
    return type(inputs)(apart)


def _on_device(function, owner=None):
    """A NumPy function taking and giving device arrays; ``out=`` comes back as given.
    ``owner``: the NumPy array whose method ``function`` is (its result may be a view)."""

    def call(*args, **kwargs):
        out = kwargs.get("out")
        host_args = _unwrap(_apart_from(out, args))
        host_kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        result = _kernel(
            lambda: function(*host_args, **host_kwargs),
            [*host_args, owner],
            host_kwargs.get("out"),
        )
        return out if isinstance(out, ndarray) else _wrap(result)

    return call


class ndarray:  # noqa: N801 (CuPy's name)
    """A device array: a NumPy array that only leaves through ``.get()``."""

    __array_priority__ = 100

    def __init__(self, array):
        self._array = array
        _allocator.track(self)

    # what CuPy refuses
    def __array__(self, *args, **kwargs):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly."
        )

    def __iter__(self):
        return (_wrap(row) for row in self._array)

    # what CuPy allows
    def get(self):
        _sync()
        return self._array.copy()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse_blas(ufunc.__name__)
        _refuse_0d_arrays(ufunc, inputs)
        outs = kwargs.get("out")
        if outs is not None:
            inputs = _apart_from(outs[0], inputs)
            kwargs["out"] = tuple(_unwrap(o) for o in outs)
        host_inputs, compute = _unwrap(inputs), getattr(ufunc, method)
        out = kwargs["out"][0] if outs is not None else None
        result = _kernel(lambda: compute(*host_inputs, **kwargs), host_inputs, out)
        if outs is not None and len(outs) == 1:
            return outs[0]  # the device array that was written into
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        _refuse_blas(func.__name__)
        return _on_device(func)(*args, **kwargs)

    def __getitem__(self, key):
        array, key = self._array, _unwrap(key)
        return _wrap(_kernel(lambda: array[key], [array]))

    def __setitem__(self, key, value):
        array, key, value = self._array, _unwrap(key), _unwrap(value)
        _kernel(lambda: array.__setitem__(key, value), [value], out=array)

    def __getattr__(self, name):
        if name == "_array" or name.startswith("__"):
            # _array: not set yet (copy, pickle). Dunders: NumPy would read the memory
            # through __array_interface__, which a GPU array does not offer.
            raise AttributeError(name)
        if name not in API["ndarray"]:
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r}")
        if name in ("item", "tolist"):
            _sync()
        attr = getattr(self._array, name)  # shape, dtype, T, astype, sum, reshape, ...
        if name in ("max", "min", "sum", "prod", "mean", "any", "all"):
            reduce = attr

            def attr(*args, **kwargs):
                if NO_REDUCTION_KEYWORDS & set(kwargs):
                    raise TypeError(f"{name}() got an unexpected keyword argument")
                return reduce(*args, **kwargs)

        return _on_device(attr, self._array) if callable(attr) else _wrap(attr)

    def __len__(self):
        return len(self._array)

    def __float__(self):
        _sync()
        return float(self._array)

    def __int__(self):
        _sync()
        return int(self._array)

    def __bool__(self):
        _sync()
        return bool(self._array)

    def __repr__(self):
        _sync()
        return repr(self._array).replace("array", "fakecupy.array", 1)

    # operators: the ufuncs, through __array_ufunc__
    def _binary(ufunc, reflected=False):
        def operator(self, other):
            if type(other).__dict__.get("__array_ufunc__", 0) is None:  # it asks to go first:
                return NotImplemented  # ``gpu_array * node`` is ``node.__rmul__``, as in CuPy
            return ufunc(other, self) if reflected else ufunc(self, other)

        return operator

    def _in_place(ufunc):
        def operator(self, other):
            ufunc(self, other, out=self)
            return self

        return operator

    __add__, __radd__, __iadd__ = _binary(numpy.add), _binary(numpy.add, True), _in_place(numpy.add)
    __sub__, __rsub__ = _binary(numpy.subtract), _binary(numpy.subtract, True)
    __isub__ = _in_place(numpy.subtract)
    __mul__, __rmul__ = _binary(numpy.multiply), _binary(numpy.multiply, True)
    __imul__ = _in_place(numpy.multiply)
    __truediv__, __rtruediv__ = _binary(numpy.divide), _binary(numpy.divide, True)
    __itruediv__ = _in_place(numpy.divide)
    __pow__, __rpow__ = _binary(numpy.power), _binary(numpy.power, True)
    __matmul__, __rmatmul__ = _binary(numpy.matmul), _binary(numpy.matmul, True)
    __lt__, __le__ = _binary(numpy.less), _binary(numpy.less_equal)
    __gt__, __ge__ = _binary(numpy.greater), _binary(numpy.greater_equal)
    __eq__, __ne__ = _binary(numpy.equal), _binary(numpy.not_equal)  # type: ignore[assignment]
    __and__, __rand__ = _binary(numpy.bitwise_and), _binary(numpy.bitwise_and, True)
    __or__, __ror__ = _binary(numpy.bitwise_or), _binary(numpy.bitwise_or, True)
    __xor__, __rxor__ = _binary(numpy.bitwise_xor), _binary(numpy.bitwise_xor, True)
    __floordiv__, __mod__ = _binary(numpy.floor_divide), _binary(numpy.remainder)
    __hash__ = None  # type: ignore[assignment]

    def __invert__(self):
        return numpy.invert(self)

    def __neg__(self):
        return numpy.negative(self)

    def __abs__(self):
        return numpy.absolute(self)

    del _binary, _in_place


ndarray.__module__ = "cupy._core.core"


class _MemoryPool:
    """Bytes of live device arrays (``used``), and the most ever live (``total``): a
    pool keeps freed blocks, so what it holds only grows to the peak of live arrays."""

    def __init__(self):
        self._live: dict[int, int] = {}
        self._held = 0

    def track(self, array: ndarray) -> None:
        buffer = array._array
        if buffer.base is not None or id(buffer) in self._live:
            return  # a view (its memory belongs to another array), or known already
        self._live[id(buffer)] = buffer.nbytes
        weakref.finalize(buffer, self._live.pop, id(buffer), None)
        self._held = max(self._held, sum(self._live.values()))

    def used_bytes(self) -> int:
        return sum(self._live.values())

    def total_bytes(self) -> int:
        return self._held

    def malloc(self, size):  # what using_allocator is given (the double allocates by NumPy)
        raise NotImplementedError("the CuPy double allocates through NumPy")


_pool = _MemoryPool()
_allocator = _pool  # the pool new arrays count in (cuda.using_allocator changes it)


def get_default_memory_pool() -> _MemoryPool:
    return _pool


@contextlib.contextmanager
def _using_allocator(allocator=None):
    """``cupy.cuda.using_allocator(pool.malloc)``: new arrays come from ``pool``."""
    global _allocator
    previous, _allocator = _allocator, allocator.__self__
    try:
        yield
    finally:
        _allocator = previous


class _Device:
    def synchronize(self) -> None:
        _refuse_while_recording("operation not permitted when stream is capturing")


class _Stream:
    """A CUDA stream: kernels launched inside ``with stream:`` queue on it."""

    def __init__(self, non_blocking=False):
        self.synchronized = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self) -> None:
        _refuse_while_recording("operation not permitted when stream is capturing")
        self.synchronized = True

    def begin_capture(self, mode=None):
        global _recording
        if _recording is not None:
            raise CUDARuntimeError("cudaErrorIllegalState: a stream is recording already")
        _recording = SimpleNamespace(kernels=[], broken=False, stream=self)

    def is_capturing(self) -> bool:
        return _recording is not None and _recording.stream is self

    def end_capture(self) -> _Graph:
        global _recording
        if not self.is_capturing():
            raise CUDARuntimeError("cudaErrorIllegalState: this stream is not recording")
        recording, _recording = _recording, None
        if recording.broken:
            raise CUDARuntimeError(
                "cudaErrorStreamCaptureInvalidated: operation failed due to a previous "
                "error during capture"
            )
        return _Graph(recording.kernels)


_null_stream = _Stream()

cuda = SimpleNamespace(
    runtime=SimpleNamespace(getDeviceCount=lambda: 1),
    Device=_Device,
    Stream=_Stream,
    Graph=_Graph,
    graph=SimpleNamespace(Graph=_Graph),
    MemoryPool=_MemoryPool,
    using_allocator=_using_allocator,
    get_current_stream=lambda: _null_stream,
)


def take_along_axis(a, indices, axis):
    """As CuPy: integer indices out of range wrap around (NumPy raises IndexError)."""
    array, index = a._array, indices._array
    return _wrap(
        _kernel(lambda: numpy.take_along_axis(array, index % array.shape[axis], axis), [array])
    )


lib = SimpleNamespace(
    stride_tricks=SimpleNamespace(as_strided=_on_device(numpy.lib.stride_tricks.as_strided))
)


def asarray(data, dtype=None):
    """Host data to the device (explicit, so NumPy arrays are welcome here)."""
    if isinstance(data, ndarray):
        return data if dtype is None or data.dtype == dtype else data.astype(dtype)
    _from_host()
    return ndarray(numpy.array(data, dtype=dtype))


def array(data, dtype=None, copy=True):
    if isinstance(data, ndarray):
        host = data._array
        return ndarray(_kernel(lambda: numpy.array(host, dtype=dtype, copy=copy), [host]))
    _from_host()
    return ndarray(numpy.array(data, dtype=dtype))


class _FusionVarArray:
    """What ``cupy.fuse`` calls the function with while it traces it: a dtype and ndim,
    no shape, no bool() (CuPy 14.2: ``Exception("Can't cast to bool")``); each op makes
    another. So a function CuPy cannot fuse fails here too."""

    __module__ = "cupy._core.fusion"
    __array_priority__ = 200

    def __init__(self, sample, ndim=0):
        self._sample = sample  # a 0-d NumPy array of the dtype: results take its promotion
        self.dtype, self.ndim = sample.dtype, ndim

    def __bool__(self):
        raise Exception("Can't cast to bool")  # noqa: TRY002 (what CuPy raises)

    def astype(self, dtype, copy=True):
        return _FusionVarArray(self._sample.astype(dtype), self.ndim)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or set(kwargs) - UFUNC_KEYWORDS:
            raise TypeError(f"cupy.fuse cannot trace {ufunc.__name__}.{method}({kwargs})")
        with numpy.errstate(all="ignore"):  # the samples' values mean nothing
            return _traced(getattr(ufunc, method)(*_samples(inputs)), inputs)

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ not in ("where", "clip"):  # elementwise, and fusable in CuPy
            raise TypeError(f"cupy.fuse cannot trace {func.__name__}")
        with numpy.errstate(all="ignore"):
            return _traced(func(*_samples(args), **kwargs), args)

    __hash__ = None  # type: ignore[assignment]


def _traced_operator(name):
    def operator(self, *args):
        with numpy.errstate(all="ignore"):  # the samples' values mean nothing
            return _traced(getattr(self._sample, name)(*_samples(args)), (self, *args))

    return operator


for _name in (
    "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __pow__ "
    "__rpow__ __neg__ __abs__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__"
).split():
    setattr(_FusionVarArray, _name, _traced_operator(_name))


def _samples(values):
    return [v._sample if isinstance(v, _FusionVarArray) else v for v in values]


def _traced(result, inputs):
    """The stand-in for an op's result on stand-ins: its dtype, the inputs' largest ndim."""
    ndim = max((v.ndim for v in inputs if isinstance(v, _FusionVarArray)), default=0)
    return _FusionVarArray(numpy.asarray(result), ndim)


def fuse(*args, **kwargs):
    """``@cupy.fuse()`` or ``cupy.fuse(kernel_name=...)(f)``: traces ``f`` once per input
    dtypes with stand-ins (``_FusionVarArray``), as CuPy does to compile its kernel, so
    what CuPy cannot fuse raises here too; then runs ``f`` on the arrays for the values."""

    def decorate(function):
        traced = set()

        def kernel(*inputs):
            key = tuple(getattr(x, "dtype", type(x)) for x in inputs)
            if key not in traced:
                stand_ins = [
                    _FusionVarArray(numpy.zeros((), x.dtype), x.ndim)
                    if isinstance(x, ndarray)
                    else x
                    for x in inputs
                ]
                function(*stand_ins)
                traced.add(key)
            return function(*inputs)

        return functools.wraps(function)(kernel)

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return decorate(args[0])
    return decorate


class _Random:
    """``cupy.random``: the legacy functions the kit uses, with a dtype= (as in CuPy)."""

    def __init__(self):
        self._rng = numpy.random.default_rng(0)

    def standard_normal(self, size=None, dtype=float):
        return ndarray(self._rng.standard_normal(size).astype(dtype))

    def randint(self, low, high=None, size=None, dtype=int):
        return ndarray(self._rng.integers(low, high, size).astype(dtype))

    @staticmethod
    def default_rng(seed=None):
        """``cupy.random.default_rng``: a Generator whose draws are device arrays."""
        rng = numpy.random.default_rng(seed)
        return SimpleNamespace(
            **{
                name: (lambda draw: lambda *a, **k: _wrap(numpy.asarray(draw(*a, **k))))(
                    getattr(rng, name)
                )
                for name in ("random", "standard_normal", "integers", "permutation", "uniform")
            }
        )


random = _Random()


def _keywords_checked(name, function, ufunc):
    """``function``, refusing keywords that CuPy's ``name`` does not take."""
    allowed = API["cupy"][name]
    if ufunc:
        allowed = UFUNC_KEYWORDS
    elif not isinstance(allowed, list):
        return function

    def call(*args, **kwargs):
        unknown = set(kwargs) - set(allowed)
        if unknown:
            raise TypeError(f"cupy.{name}() got unexpected keyword arguments {sorted(unknown)}")
        return function(*args, **kwargs)

    return call


def _refusing(check, function):
    """``function``, after ``check(args)``, which raises what CuPy would refuse."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        check(args)
        return function(*args, **kwargs)

    return call


def __getattr__(name):
    """Every other function CuPy has, as NumPy's on device arrays only; constants as they
    are. A name CuPy does not have raises AttributeError, as it would."""
    if name not in API["cupy"]:
        raise AttributeError(f"module 'cupy' has no attribute {name!r} (CuPy 14.2 has none)")
    attr = getattr(numpy, name)
    if callable(attr) and not isinstance(attr, type):
        if name in BLAS:
            attr = _refusing(lambda args: _refuse_blas(name), attr)
        function = functools.wraps(attr)(
            _keywords_checked(name, _on_device(attr), isinstance(attr, numpy.ufunc))
        )
        if isinstance(attr, numpy.ufunc):  # cupy.add.at (CuPy 13): in place, on device arrays
            function = _refusing(lambda args, ufunc=attr: _refuse_0d_arrays(ufunc, args), function)
            function.at = _on_device(attr.at)
        return function
    return attr
