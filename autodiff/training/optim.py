"""Optimisers: how parameters move, given their gradients.

Each ``step(grads)`` changes the parameters' values *in place* (``param.value``), so a
graph built once keeps reading the current weights, and no memory is reallocated.

* ``SGD``: v = momentum * v + g;  p = p - lr * v   (momentum=0 is plain gradient descent)
* ``Adam``: running means of g and g**2, corrected for their start at zero:
  m = b1 m + (1 - b1) g;  s = b2 s + (1 - b2) g**2;
  p = p - lr * (m / (1 - b1**t)) / (sqrt(s / (1 - b2**t)) + eps)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import backend
from ..core.graph import Node, TensorLeaf


class Optimizer:
    """Holds the parameters (tensor leaves) and applies ``update`` to each in ``step``."""

    def __init__(self, params: Sequence[Node], lr: float):
        self.params = list(params)
        for i, p in enumerate(self.params):
            if not (isinstance(p, Node) and isinstance(p.op, TensorLeaf)):
                raise TypeError(
                    f"{type(self).__name__}: parameter {i} is {p!r}; optimisers update "
                    f"ad.tensor leaves, e.g. model.parameters()."
                )
        if lr <= 0:
            raise ValueError(f"{type(self).__name__}: the learning rate must be > 0, got {lr}.")
        self.lr = lr

    def step(self, grads: Sequence[Any] | None = None) -> None:
        """Update every parameter from its gradient (arrays, or Nodes with values); with
        no ``grads``, from each parameter's ``.grad`` (filled by ``loss.backward()``)."""
        if grads is None:
            grads = [self._grad_of(i, p) for i, p in enumerate(self.params)]
        if len(grads) != len(self.params):
            raise ValueError(
                f"{type(self).__name__}.step: {len(grads)} gradients for "
                f"{len(self.params)} parameters; pass one per parameter, in order."
            )
        for i, (param, grad) in enumerate(zip(self.params, grads, strict=True)):
            array: Any = grad.value if isinstance(grad, Node) else grad
            value: Any = param.value
            if tuple(array.shape) != tuple(value.shape):
                raise ValueError(
                    f"{type(self).__name__}.step: gradient {i} has shape {tuple(array.shape)} "
                    f"but parameter '{param.name}' has shape {tuple(value.shape)}."
                )
            self.update(i, value, array)

    def zero_grad(self) -> None:
        """Clear the parameters' ``.grad`` (``backward()`` adds to it, as in PyTorch)."""
        for param in self.params:
            param.grad = None

    def _grad_of(self, i: int, param: Node) -> Any:
        if param.grad is None:
            raise ValueError(
                f"{type(self).__name__}.step(): parameter {i} ('{param.name}') has no "
                f".grad. Call loss.backward() first, or pass the gradients: "
                f"step(ad.gradients(loss, params))."
            )
        return param.grad

    def update(self, i: int, value: Any, grad: Any) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with (heavy-ball) momentum.

    >>> import autodiff as ad
    >>> w = ad.tensor([1.0, 2.0])
    >>> SGD([w], lr=0.1).step([ad.tensor([1.0, -1.0])])
    >>> w.value
    array([0.9, 2.1])
    """

    def __init__(self, params: Sequence[Node], lr: float = 0.01, momentum: float = 0.0):
        super().__init__(params, lr)
        self.momentum = momentum
        self.velocity: list[Any] = [None] * len(self.params)

    def update(self, i: int, value: Any, grad: Any) -> None:
        if self.momentum:
            if self.velocity[i] is None:
                self.velocity[i] = backend.namespace(grad).zeros_like(grad)
            velocity = self.velocity[i]
            velocity *= self.momentum
            velocity += grad
            grad = velocity
        value -= self.lr * grad


class Adam(Optimizer):
    """Adam (Kingma and Ba, 2015) with bias-corrected moment estimates."""

    def __init__(
        self,
        params: Sequence[Node],
        lr: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        super().__init__(params, lr)
        self.betas, self.eps = betas, eps
        self.t = 0
        self.mean: list[Any] = [None] * len(self.params)
        self.square: list[Any] = [None] * len(self.params)

    def step(self, grads: Sequence[Any] | None = None) -> None:
        self.t += 1  # one time step for all parameters
        super().step(grads)

    def update(self, i: int, value: Any, grad: Any) -> None:
        b1, b2 = self.betas
        xp = backend.namespace(grad)
        if self.mean[i] is None:
            self.mean[i], self.square[i] = xp.zeros_like(grad), xp.zeros_like(grad)
        m, s = self.mean[i], self.square[i]
        m *= b1
        m += (1 - b1) * grad
        s *= b2
        s += (1 - b2) * grad * grad
        step = self.lr / (1 - b1**self.t)
        value -= step * m / (xp.sqrt(s / (1 - b2**self.t)) + self.eps)
