"""Numerical differentiation, and checking analytic derivatives against it.

Finite differences need only evaluations of f, which is why they are the referee for
every gradient rule in this library. They are approximate, and the lecture's point is
*why*: a big step ``h`` leaves truncation error (O(h) one-sided, O(h**2) central), a
small one drowns in rounding error, because f(x + h) - f(x) subtracts two nearly equal
numbers and cancels their leading digits (error about eps / h). The default steps
balance the two: about eps**(1/2) for one-sided differences and eps**(1/3) for central
ones, scaled to the size of x. ``error_curve`` measures the whole trade-off.

The complex step f'(x) = Im f(x + ih) / h has no subtraction, hence no cancellation:
h = 1e-20 gives f' to rounding level for any real-analytic f written with functions
that accept complex numbers. It shows that the trouble with differences is the
difference, not the step.

``check_grads`` compares reverse mode (``gradients``) and forward mode (``jvp_graph``)
with central differences along random directions, as HIPS autograd does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import backend
from ..core.gradients import jvp_graph
from ..core.graph import Node, constant, tensor
from ..ops import sum
from ..system.gradients import gradients

# Named tolerances (rtol, atol) for check_grads, by dtype. float16 keeps about 3 digits,
# and each op of a derivative rounds again: a few of its eps (9.8e-4) per op.
TOLERANCES = {"float64": (1e-5, 1e-7), "float32": (2e-2, 2e-3), "float16": (1e-1, 3e-2)}
# Dtypes too coarse for differences of their own: check_grads differences in float64.
_DIFFERENCED_IN = {"float16": "float64"}
METHODS = ("forward", "backward", "central", "complex")
# Machine epsilon, by dtype; a complex number rounds like its real and imaginary parts.
_EPS = {
    "float64": 2.220446049250313e-16,
    "float32": 1.1920929e-07,
    "float16": 9.765625e-04,
    "complex128": 2.220446049250313e-16,
    "complex64": 1.1920929e-07,
}
_COMPLEX_STEP = 1e-20  # far below eps: the complex step has no cancellation to fear


def default_step(x: Any, method: str = "central", dtype: Any = "float64") -> float:
    """The step that balances truncation and rounding error, scaled to max(1, |x|).

    One-sided differences err by about h |f''| / 2 + eps |f| / h, smallest near
    h = eps**(1/2); central ones by about h**2 |f'''| / 6 + eps |f| / h, smallest near
    h = eps**(1/3). Scaling by |x| keeps x + h a different number from x when x is large.
    ``dtype`` sets eps (float16, float32 or float64; ``derivative`` passes x's own).

    >>> f"{default_step(1.0, 'forward'):.1e}, {default_step(1.0, 'central'):.1e}"
    '1.5e-08, 6.1e-06'
    """
    _check_method("default_step", method)
    scale = max(1.0, float(abs(backend.to_numpy(x)).max(initial=0.0)))
    if method == "complex":
        return _COMPLEX_STEP * scale
    eps = _EPS.get(str(dtype), _EPS["float64"])
    power = 1 / 3 if method == "central" else 1 / 2
    return eps**power * scale


def _dtype_name(x: Any) -> str:
    """The dtype whose rounding the step must beat: x's own, float64 for Python numbers,
    lists and integers (which x + h turns into float64)."""
    name = "float64" if backend.is_weak_scalar(x) else str(backend.asarray(x).dtype)
    return name if name in _EPS else "float64"


def _check_method(caller: str, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"{caller}: method must be one of {METHODS}, got {method!r}.")


def _complex_step(f: Callable, x: Any, h: float) -> Any:
    """Im f(x + ih) / h, refusing functions that drop the imaginary part."""
    try:
        value = f(x + 1j * h)
    except TypeError as exc:
        raise TypeError(
            "derivative(method='complex') calls f with a complex number, and f refused it "
            f"({exc}). Write f with functions that accept complex input (numpy or cmath, "
            "not math), or use method='central'."
        ) from exc
    if getattr(backend.asarray(value).dtype, "kind", "") != "c":
        raise TypeError(
            "derivative(method='complex'): f(x + ih) came back real, so the step was lost "
            "(abs, comparisons, max, float() or .real inside f do that). Use method='central'."
        )
    return value.imag / h


def derivative(f: Callable, x: Any, h: float | None = None, method: str = "central") -> Any:
    """f'(x) by finite differences (or the complex step) for a scalar function.

    ``x`` may also be an array when f acts elementwise; then every entry is stepped at
    once and the result holds each entry's derivative. ``f`` may return an array (or a
    list): the result is then the derivative of each output along the step. The default step is
    balanced for x's dtype: float16 and float32 need far bigger steps than float64.

    >>> round(derivative(lambda x: x**3, 2.0), 6)
    12.0
    >>> derivative(lambda x: x**3, 2.0, method="complex")   # exact, h = 2e-20
    12.0
    """
    _check_method("derivative", method)
    h = default_step(x, method, _dtype_name(x)) if h is None else h
    f = _returning_arrays(f)
    if method == "forward":
        return (f(x + h) - f(x)) / h
    if method == "backward":
        return (f(x) - f(x - h)) / h
    if method == "complex":
        return _complex_step(f, x, h)
    return (f(x + h) - f(x - h)) / (2 * h)


def _returning_arrays(f: Callable) -> Callable:
    """f, with a list or tuple result turned into an array, so results can be subtracted."""

    def f_array(x: Any) -> Any:
        value = f(x)
        return backend.asarray(value) if isinstance(value, list | tuple) else value

    return f_array


def jacobian(f: Callable, x: Any, h: float | None = None, method: str = "central") -> backend.Array:
    """The Jacobian of f at an array x, one column of differences per entry of x.

    The result has shape ``f(x).shape + x.shape``: entry [i, j] is d f_i / d x_j.
    Each entry is stepped by its own default step, so the cost is one or two
    evaluations of f per input entry, the price numerical differences pay.

    >>> jacobian(lambda v: v[::-1] * v[0], [1.0, 2.0]).round(6).tolist()
    [[2.0, 1.0], [2.0, 0.0]]
    """
    _check_method("jacobian", method)
    x = backend.asarray(x, dtype="float64" if backend.dtype_of(x) is None else None)
    if x.dtype.kind != "f":
        x = x.astype("float64")
    xp = backend.namespace(x)
    flat_x = x.reshape(-1)
    columns = []
    for i in range(flat_x.size):
        step = default_step(flat_x[i], method, x.dtype) if h is None else h
        e_i = xp.zeros_like(flat_x)
        e_i[i] = 1

        def along_entry(t, e_i=e_i):  # f(x + t e_i): complex when t is
            return backend.asarray(f((flat_x + t * e_i).reshape(x.shape)))

        columns.append(derivative(along_entry, 0.0, step, method))
    out_shape = tuple(columns[0].shape) if columns else tuple(backend.asarray(f(x)).shape)
    if not columns:
        return xp.zeros(out_shape + x.shape, dtype=x.dtype)
    return xp.stack(columns, axis=-1).reshape(out_shape + x.shape)


def gradient(f: Callable, x: Any, h: float | None = None, method: str = "central") -> backend.Array:
    """The gradient of a scalar function of an array: its Jacobian, shaped like x.

    >>> gradient(lambda v: (v**2).sum(), [1.0, 2.0]).round(6).tolist()
    [2.0, 4.0]
    """
    jac = jacobian(f, x, h, method)
    x_shape = backend.asarray(x).shape
    if jac.shape != x_shape:
        raise ValueError(
            f"gradient: f returned shape {jac.shape[: jac.ndim - len(x_shape)]}, but a "
            f"gradient needs a scalar output. Use numerical.jacobian for vector outputs."
        )
    return jac


@dataclass
class ErrorCurve:
    """Absolute error of each method against the exact derivative, step by step.

    ``steps`` are the h values, ``errors[method]`` the errors at those steps (a zero
    error, which the complex step can reach, does not show on a log axis). Plot with::

        curve = ad.numerical.error_curve(np.sin, np.cos, 1.0)
        for method, errors in curve.errors.items():
            plt.loglog(curve.steps, errors, label=method)
    """

    steps: list[float]
    errors: dict[str, list[float]]
    exact: float

    def best(self, method: str) -> tuple[float, float]:
        """(h, error) at the smallest error of ``method``, skipping NaN errors (steps
        where f or the difference was not defined, such as sqrt stepped below 0)."""
        if method not in self.errors:
            raise KeyError(
                f"ErrorCurve.best: no errors for method {method!r}; this curve has "
                f"{list(self.errors)}. Pass methods=... to error_curve."
            )
        errors = self.errors[method]
        defined = [i for i, error in enumerate(errors) if not math.isnan(error)]
        if not defined:
            raise ValueError(
                f"ErrorCurve.best: every error of {method!r} is NaN, so no step is best. "
                f"Check that f and df are defined at x, and near it for the steps in hs."
            )
        i = min(defined, key=errors.__getitem__)
        return self.steps[i], errors[i]


def error_curve(
    f: Callable,
    df: Callable,
    x: float,
    hs: Sequence[float] | None = None,
    methods: str | Sequence[str] = ("forward", "central", "complex"),
) -> ErrorCurve:
    """The data of the classic log-log plot: error against step size, per method.

    ``methods`` is a sequence of names from ``METHODS``, or one name.

    Truncation error falls as h shrinks (slope 1 forward, 2 central); below the best
    step rounding error rises as eps / h. The complex step stays at rounding level.

    >>> import numpy as np
    >>> curve = error_curve(np.sin, np.cos, 1.0, hs=[1e-2, 1e-5, 1e-12])
    >>> curve.best("central")[0]   # truncation wins above it, rounding below
    1e-05
    >>> curve.errors["complex"][-1] < 1e-15   # no cancellation: smaller h only helps
    True
    """
    hs = [10.0 ** (-k / 2) for k in range(0, 41)] if hs is None else [float(h) for h in hs]
    exact = float(df(x))
    errors = {}
    for method in [methods] if isinstance(methods, str) else methods:
        _check_method("error_curve", method)
        errors[method] = [abs(float(derivative(f, x, h, method)) - exact) for h in hs]
    return ErrorCurve(hs, errors, exact)


def _eval(f: Callable, args: Sequence) -> object:
    out = f(*[tensor(a) for a in args])
    if not isinstance(out, Node):
        raise TypeError("check_grads: f must return a Node built with autodiff ops.")
    return out.value


def _directional_difference(f, args, index, direction):
    """The numerical J v: the central difference of t -> f(..., x + t v, ...) at 0."""
    x = args[index]
    h = default_step(x, "central", x.dtype) / max(1.0, float(abs(direction).max()))

    def along_direction(t):
        moved = list(args)
        moved[index] = x + t * direction
        return _eval(f, moved)

    return derivative(along_direction, 0.0, h, "central")


def _norm(x) -> float:
    return float((backend.to_numpy(x).astype("float64") ** 2).sum() ** 0.5)


def _vdot(a, b) -> float:
    return float((backend.to_numpy(a).astype("float64") * backend.to_numpy(b)).sum())


def _fail(what: str, index: int, x, error: float, limit: float, analytic, numeric):
    raise AssertionError(
        f"check_grads: {what} disagrees with finite differences for argument {index} "
        f"(shape {tuple(x.shape)}, {x.dtype}): max error {error:.3g} > tolerance "
        f"{limit:.3g}.\n  analytic:  {analytic}\n  numerical: {numeric}"
    )


def _difference_args(args):
    """The arguments the finite differences step: float16 ones as float64 copies.

    A float16 central difference has about two correct digits (eps**(2/3) = 1e-2, the
    size of the errors to catch), so it would be no referee. In float64 it measures the
    derivative of the same function, exactly enough to judge float16 rules by.
    """
    return [
        a.astype(_DIFFERENCED_IN[str(a.dtype)]) if str(a.dtype) in _DIFFERENCED_IN else a
        for a in args
    ]


def _check_first_order(f, args, modes, rtol, atol, seed):
    difference_args = _difference_args(args)
    for index, x in enumerate(args):
        leaves = [tensor(a) for a in args]
        out = f(*leaves)
        v = backend.random_normal(x.shape, x.dtype, backend.device_of(x), seed + index)
        numeric = _directional_difference(f, difference_args, index, v)
        if "fwd" in modes:
            analytic = jvp_graph(out, [leaves[index]], [constant(v)]).value
            error = float(abs(backend.to_numpy(analytic - numeric)).max(initial=0.0))
            limit = atol + rtol * float(abs(backend.to_numpy(numeric)).max(initial=0.0))
            if not error <= limit:
                _fail("forward mode (jvp)", index, x, error, limit, analytic, numeric)
        if "rev" in modes:
            u = backend.random_normal(out.shape, out.dtype, backend.device_of(x), seed + 99)
            (vjp,) = gradients(out, [leaves[index]], output_grad=constant(u))
            analytic, expected = _vdot(vjp.value, v), _vdot(u, numeric)
            # Rounding errs entry by entry, so each side may be off by rtol times the
            # sum of its terms' sizes; |u| |Jv| can be far bigger than that, and would
            # let a wrong rule pass at float16's rtol.
            terms = max(_vdot(abs(vjp.value), abs(v)), _vdot(abs(u), abs(numeric)))
            limit = atol * _norm(u) + rtol * terms
            if not abs(analytic - expected) <= limit:
                _fail(
                    "reverse mode <vjp(u), v>",
                    index,
                    x,
                    abs(analytic - expected),
                    limit,
                    analytic,
                    expected,
                )


def _derivative_function(f, args, mode, seed):
    """A scalar function of the same arguments whose value is a first derivative of f."""
    out = f(*[tensor(a) for a in args])
    u = backend.random_normal(out.shape, out.dtype, backend.device_of(args[0]), seed + 7)
    ws = [
        backend.random_normal(a.shape, a.dtype, backend.device_of(a), seed + 13 + i)
        for i, a in enumerate(args)
    ]

    def reverse_derivative(*xs):
        grads = gradients(f(*xs), list(xs), output_grad=constant(u))
        total = sum(grads[0] * ws[0])
        for g, w in zip(grads[1:], ws[1:], strict=True):
            total = total + sum(g * w)
        return total

    def forward_derivative(*xs):
        return sum(jvp_graph(f(*xs), list(xs), [constant(w) for w in ws]) * u)

    return reverse_derivative if mode == "rev" else forward_derivative


def check_grads(
    f: Callable,
    args: Sequence,
    order: int = 1,
    modes: Sequence[str] = ("rev", "fwd"),
    *,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
) -> None:
    """Check f's derivatives (reverse and/or forward mode) against central differences.

    ``f`` takes Nodes and returns a Node. Along a random direction v for each argument,
    forward mode must match the numerical J v, and reverse mode must satisfy
    <vjp(u), v> = <u, J v> for a random u. ``order=2`` checks the derivatives of the
    derivatives too (each built as a graph). Raises AssertionError with a report.
    Tolerances default to ``TOLERANCES`` for the arguments' dtype.

    float16 is checked honestly but not by float16 differences, which are accurate to
    about 1e-2 only: the analytic derivatives run in float16, as f's user runs them,
    while the finite differences evaluate f on float64 copies of the arguments. What
    is checked is the rule, to float16's rounding (``TOLERANCES["float16"]``).

    >>> import autodiff as ad
    >>> check_grads(lambda x: ad.sin(x) * x, [[0.5, 1.5]], order=2)
    """
    modes = tuple(modes)
    if not set(modes) <= {"rev", "fwd"} or not modes:
        raise ValueError(f"check_grads: modes must be drawn from ('rev', 'fwd'), got {modes}.")
    args = [backend.asarray(a) for a in args]
    for i, a in enumerate(args):
        if a.dtype.kind != "f":
            raise TypeError(
                f"check_grads: argument {i} has dtype {a.dtype}; derivatives need floating "
                f"point. Pass floats, e.g. np.asarray(x, dtype='float64')."
            )
    default_rtol, default_atol = TOLERANCES.get(str(args[0].dtype), TOLERANCES["float64"])
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    _check_first_order(f, args, modes, rtol, atol, seed)
    if order > 1:
        for mode in modes:
            derivative_f = _derivative_function(f, args, mode, seed)
            check_grads(derivative_f, args, order - 1, modes, rtol=rtol, atol=atol, seed=seed + 1)
