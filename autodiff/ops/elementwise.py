"""Elementwise ops: the chain rule one number at a time.

Each class holds the forward computation, the gradient rule (vector-Jacobian product,
``d`` below is the adjoint of a value) and the tangent rule (Jacobian-vector product,
a dot marks a tangent). Binary ops broadcast like NumPy; the engine sums their
gradients back to each input's shape, so the rules here never mention broadcasting.

The smooth functions are here; the ops defined by cases (relu, max, where, clip,
comparisons) are in piecewise.py.
"""

from __future__ import annotations

from ..core.backend import broadcast_shapes as broadcast_shapes_of
from ..core.backend import is_weak_scalar, namespace, numbers
from ..core.errors import ShapeError
from ..core.graph import Node, Op, Spec, describe
from .shape import zeros_like
from .static_shapes import broadcast_shapes, result_dtype


class Elementwise(Op, register=False):
    """The family: output element i needs element i of each input only (after
    broadcasting).

    Shape rule: the inputs' shapes broadcast together; the dtype is NumPy's result type
    (both also with symbols for unknown lengths, see ops/static_shapes.py).
    """

    takes_numbers = True

    def explain(self, exc, input_vals, attrs):
        """Inputs whose shapes cannot broadcast are a ShapeError naming both shapes."""
        shapes = [tuple(getattr(v, "shape", ())) for v in input_vals]
        try:
            broadcast_shapes_of(*shapes)
        except ValueError:
            inputs = ", ".join(describe(v) for v in input_vals)
            return ShapeError(
                f"{self.name}: cannot broadcast shapes {' and '.join(map(str, shapes))}. "
                f"Broadcasting lines up trailing dimensions, which must be equal or 1; "
                f"reshape or transpose one input (inputs: {inputs})."
            )
        return super().explain(exc, input_vals, attrs)

    def infer(self, *inputs: Spec, **attrs) -> Spec:
        shape = broadcast_shapes(*(x.shape for x in inputs))
        return Spec(shape, result_dtype(*(x.dtype for x in inputs)))


class Add(Elementwise):
    """Y = A + B;   dA = dY,  dB = dY;   Y' = A' + B'."""

    broadcasts = True

    def compute(self, a, b):
        return a + b

    def gradient(self, node, output_grad):
        return [output_grad, output_grad]

    def jvp(self, node, a_dot, b_dot):
        return a_dot + b_dot


def add(a, b, *, name: str | None = None) -> Node:
    """a + b, broadcasting. >>> add(1.0, 2.0).value -> 3.0"""
    return Add.apply(a, b, name=name)


class Subtract(Elementwise):
    """Y = A - B;   dA = dY,  dB = -dY;   Y' = A' - B'."""

    broadcasts = True

    def compute(self, a, b):
        return a - b

    def gradient(self, node, output_grad):
        return [output_grad, -output_grad]

    def jvp(self, node, a_dot, b_dot):
        return a_dot - b_dot


def subtract(a, b, *, name: str | None = None) -> Node:
    """a - b, broadcasting."""
    return Subtract.apply(a, b, name=name)


class Multiply(Elementwise):
    """Y = A * B;   dA = dY * B,  dB = dY * A;   Y' = A' * B + A * B'."""

    broadcasts = True

    def compute(self, a, b):
        return a * b

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * b, output_grad * a]

    def jvp(self, node, a_dot, b_dot):
        a, b = node.inputs
        return a_dot * b + a * b_dot


def multiply(a, b, *, name: str | None = None) -> Node:
    """a * b, broadcasting."""
    return Multiply.apply(a, b, name=name)


class Divide(Elementwise):
    """Y = A / B;   dA = dY / B,  dB = -dY * Y / B;   Y' = (A' - Y * B') / B."""

    broadcasts = True

    def compute(self, a, b):
        return a / b

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad / b, -output_grad * node / b]

    def jvp(self, node, a_dot, b_dot):
        a, b = node.inputs
        return (a_dot - node * b_dot) / b


def divide(a, b, *, name: str | None = None) -> Node:
    """a / b, broadcasting."""
    return Divide.apply(a, b, name=name)


class Power(Elementwise):
    """Y = A ** B (B an array, A > 0);   dA = dY * B * A**(B-1),  dB = dY * log(A) * Y."""

    broadcasts = True

    def compute(self, a, b):
        return a**b

    def gradient(self, node, output_grad):
        a, b = node.inputs
        return [output_grad * b * a ** (b - 1), output_grad * log(a) * node]

    def jvp(self, node, a_dot, b_dot):
        a, b = node.inputs
        return a_dot * b * a ** (b - 1) + b_dot * log(a) * node


class PowerScalar(Elementwise):
    """Y = X ** p (p a Python number);   dX = dY * p * X**(p-1);   Y' = p * X**(p-1) * X'."""

    name = "power_scalar"

    def compute(self, x, exponent):
        return x**exponent

    def gradient(self, node, output_grad):
        (x,) = node.inputs
        p = node.attrs["exponent"]
        return [zeros_like(x) if p == 0 else _times_derivative(output_grad, x, p)]

    def jvp(self, node, x_dot):
        (x,) = node.inputs
        p = node.attrs["exponent"]
        return None if p == 0 else _times_derivative(x_dot, x, p)


def _times_derivative(d, x, p):
    """d * p * x**(p-1), with no ``* 1`` or ``** 1`` node: d for p = 1, d * 2 * x for 2."""
    return d if p == 1 else d * p * (x if p == 2 else x ** (p - 1))


def power(a, b, *, name: str | None = None) -> Node:
    """a ** b. A number exponent (``x ** 3``, ``x ** np.int64(3)``) uses the simpler rule
    of PowerScalar."""
    (b,) = numbers([b])
    if is_weak_scalar(b):
        return PowerScalar.apply(a, exponent=b, name=name)
    return Power.apply(a, b, name=name)


class Negative(Elementwise):
    """Y = -X;   dX = -dY;   Y' = -X'."""

    def compute(self, x):
        return -x

    def gradient(self, node, output_grad):
        return [-output_grad]

    def jvp(self, node, x_dot):
        return -x_dot


def negative(x, *, name: str | None = None) -> Node:
    """-x."""
    return Negative.apply(x, name=name)


class Exp(Elementwise):
    """Y = exp(X);   dX = dY * Y;   Y' = Y * X'."""

    def compute(self, x):
        return namespace(x).exp(x)

    def gradient(self, node, output_grad):
        return [output_grad * node]

    def jvp(self, node, x_dot):
        return x_dot * node


def exp(x, *, name: str | None = None) -> Node:
    """e ** x, elementwise."""
    return Exp.apply(x, name=name)


class Log(Elementwise):
    """Y = log(X);   dX = dY / X;   Y' = X' / X."""

    def compute(self, x):
        return namespace(x).log(x)

    def gradient(self, node, output_grad):
        return [output_grad / node.inputs[0]]

    def jvp(self, node, x_dot):
        return x_dot / node.inputs[0]


def log(x, *, name: str | None = None) -> Node:
    """Natural logarithm, elementwise."""
    return Log.apply(x, name=name)


class Sin(Elementwise):
    """Y = sin(X);   dX = dY * cos(X);   Y' = cos(X) * X'."""

    def compute(self, x):
        return namespace(x).sin(x)

    def gradient(self, node, output_grad):
        return [output_grad * cos(node.inputs[0])]

    def jvp(self, node, x_dot):
        return x_dot * cos(node.inputs[0])


def sin(x, *, name: str | None = None) -> Node:
    """Sine, elementwise."""
    return Sin.apply(x, name=name)


class Cos(Elementwise):
    """Y = cos(X);   dX = -dY * sin(X);   Y' = -sin(X) * X'."""

    def compute(self, x):
        return namespace(x).cos(x)

    def gradient(self, node, output_grad):
        return [-output_grad * sin(node.inputs[0])]

    def jvp(self, node, x_dot):
        return -x_dot * sin(node.inputs[0])


def cos(x, *, name: str | None = None) -> Node:
    """Cosine, elementwise."""
    return Cos.apply(x, name=name)


class Tanh(Elementwise):
    """Y = tanh(X);   dX = dY * (1 - Y**2);   Y' = (1 - Y**2) * X'."""

    def compute(self, x):
        return namespace(x).tanh(x)

    def gradient(self, node, output_grad):
        return [output_grad * (1 - node * node)]

    def jvp(self, node, x_dot):
        return x_dot * (1 - node * node)


def tanh(x, *, name: str | None = None) -> Node:
    """Hyperbolic tangent, elementwise."""
    return Tanh.apply(x, name=name)


class Sigmoid(Elementwise):
    """Y = 1 / (1 + exp(-X));   dX = dY * Y * (1 - Y);   Y' = Y * (1 - Y) * X'."""

    def compute(self, x):
        # The tanh form never overflows, for large |x| of either sign.
        return 0.5 * (namespace(x).tanh(0.5 * x) + 1)

    def gradient(self, node, output_grad):
        return [output_grad * node * (1 - node)]

    def jvp(self, node, x_dot):
        return x_dot * node * (1 - node)


def sigmoid(x, *, name: str | None = None) -> Node:
    """The logistic function 1 / (1 + exp(-x)), elementwise."""
    return Sigmoid.apply(x, name=name)


class Sqrt(Elementwise):
    """Y = sqrt(X);   dX = dY / (2 Y);   Y' = X' / (2 Y)."""

    def compute(self, x):
        return namespace(x).sqrt(x)

    def gradient(self, node, output_grad):
        return [output_grad * 0.5 / node]

    def jvp(self, node, x_dot):
        return x_dot * 0.5 / node


def sqrt(x, *, name: str | None = None) -> Node:
    """Square root, elementwise."""
    return Sqrt.apply(x, name=name)


class Log1p(Elementwise):
    """Y = log(1 + X), accurate for tiny X;   dX = dY / (1 + X);   Y' = X' / (1 + X)."""

    def compute(self, x):
        return namespace(x).log1p(x)

    def gradient(self, node, output_grad):
        return [output_grad / (1 + node.inputs[0])]

    def jvp(self, node, x_dot):
        return x_dot / (1 + node.inputs[0])


def log1p(x, *, name: str | None = None) -> Node:
    """log(1 + x), elementwise, without the rounding of 1 + x for tiny x."""
    return Log1p.apply(x, name=name)


class Expm1(Elementwise):
    """Y = exp(X) - 1, accurate for tiny X;   dX = dY * (Y + 1);   Y' = (Y + 1) * X'."""

    def compute(self, x):
        return namespace(x).expm1(x)

    def gradient(self, node, output_grad):
        return [output_grad * (node + 1)]

    def jvp(self, node, x_dot):
        return x_dot * (node + 1)


def expm1(x, *, name: str | None = None) -> Node:
    """exp(x) - 1, elementwise, without cancellation for tiny x."""
    return Expm1.apply(x, name=name)


GELU_SCALE = 0.7978845608028654  # sqrt(2 / pi)
GELU_CUBIC = 0.044715


class Gelu(Elementwise):
    """Y = X/2 (1 + T),  T = tanh(U),  U = c (X + k X**3)  (c = sqrt(2/pi), k = 0.044715);
    dX = dY * G,   G = (1 + T)/2 + X/2 (1 - T**2) c (1 + 3k X**2);   Y' = G * X'.

    The tanh approximation of GELU, X * Phi(X), used by GPT-2 and by PyTorch's
    ``gelu(approximate='tanh')``: exact GELU needs erf, which NumPy does not have.
    """

    def compute(self, x):
        u = GELU_SCALE * (x + GELU_CUBIC * x * x * x)
        return 0.5 * x * (1 + namespace(x).tanh(u))

    def gradient(self, node, output_grad):
        return [output_grad * _gelu_slope(node.inputs[0])]

    def jvp(self, node, x_dot):
        return x_dot * _gelu_slope(node.inputs[0])


def _gelu_slope(x: Node) -> Node:
    t = tanh(GELU_SCALE * (x + GELU_CUBIC * x * x * x))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_SCALE * (1 + 3 * GELU_CUBIC * x * x)


def gelu(x, *, name: str | None = None) -> Node:
    """GELU, x * Phi(x), in the tanh approximation (GPT-2's; PyTorch's approximate='tanh')."""
    return Gelu.apply(x, name=name)
