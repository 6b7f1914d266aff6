"""Numerical differentiation, and checking analytic derivatives against it.

Finite differences need only evaluations of f, which is why they are the referee for
every gradient rule in this library. They are approximate: a step ``h`` that is too big
leaves truncation error, one that is too small drowns in rounding error. The default
steps balance the two: about eps**(1/2) for one-sided differences (error O(h)) and
eps**(1/3) for central ones (error O(h**2)), scaled to the size of x.

``check_grads`` compares reverse mode (``gradients``) and forward mode (``jvp_graph``)
with central differences along random directions, as HIPS autograd does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import backend
from .gradients import gradients, jvp_graph
from .graph import Node, constant, tensor
from .ops import sum

# Named tolerances (rtol, atol) for check_grads, by dtype.
TOLERANCES = {"float64": (1e-5, 1e-7), "float32": (2e-2, 2e-3)}
_METHODS = ("forward", "backward", "central")
_EPS = {"float64": 2.220446049250313e-16, "float32": 1.1920929e-07}  # machine epsilon


def default_step(x, method: str = "central", dtype="float64") -> float:
    """The step that balances truncation and rounding error, scaled to |x|."""
    eps = _EPS.get(str(dtype), _EPS["float64"])
    power = 1 / 3 if method == "central" else 1 / 2
    scale = max(1.0, float(abs(backend.to_numpy(x)).max(initial=0.0)))
    return eps**power * scale


def derivative(f: Callable, x: float, h: float | None = None, method: str = "central") -> float:
    """f'(x) for a scalar function by finite differences.

    >>> round(derivative(lambda x: x**3, 2.0), 6)
    12.0
    """
    if method not in _METHODS:
        raise ValueError(f"derivative: method must be one of {_METHODS}, got {method!r}.")
    h = default_step(x, method) if h is None else h
    if method == "forward":
        return (f(x + h) - f(x)) / h
    if method == "backward":
        return (f(x) - f(x - h)) / h
    return (f(x + h) - f(x - h)) / (2 * h)


def gradient(f: Callable, x, h: float | None = None):
    """The gradient of a scalar function of an array, one central difference per entry.

    >>> gradient(lambda v: (v**2).sum(), [1.0, 2.0]).round(6).tolist()
    [2.0, 4.0]
    """
    x = backend.asarray(x, dtype="float64", copy=True)  # perturbed below: never the caller's
    h = default_step(x) if h is None else h
    grad = x * 0
    flat_x, flat_grad = x.reshape(-1), grad.reshape(-1)
    for i in range(flat_x.size):
        original = flat_x[i].item()
        flat_x[i] = original + h
        f_plus = f(x)
        flat_x[i] = original - h
        f_minus = f(x)
        flat_x[i] = original
        flat_grad[i] = (f_plus - f_minus) / (2 * h)
    return grad


def _eval(f: Callable, args: Sequence) -> object:
    out = f(*[tensor(a) for a in args])
    if not isinstance(out, Node):
        raise TypeError("check_grads: f must return a Node built with autodiff ops.")
    return out.value


def _directional_difference(f, args, index, direction):
    """(f(x + h v) - f(x - h v)) / 2h in argument ``index``: the numerical J v."""
    x = args[index]
    h = default_step(x, "central", x.dtype) / max(1.0, float(abs(direction).max()))
    plus = list(args)
    plus[index] = x + h * direction
    minus = list(args)
    minus[index] = x - h * direction
    return (_eval(f, plus) - _eval(f, minus)) / (2 * h)


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


def _check_first_order(f, args, modes, rtol, atol, seed):
    for index, x in enumerate(args):
        leaves = [tensor(a) for a in args]
        out = f(*leaves)
        v = backend.random_normal(x.shape, x.dtype, backend.device_of(x), seed + index)
        numeric = _directional_difference(f, args, index, v)
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
            limit = atol * _norm(u) + rtol * _norm(u) * _norm(numeric)
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
