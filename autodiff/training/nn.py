"""Layers, models, losses and a training loop: a thin layer over the engine.

A model is a Python object that holds its parameters as ``ad.tensor`` leaves and builds
its forward graph when called. Training repeats three steps: build the loss, let
``gradients`` build the gradient graph, and let an optimiser (``autodiff.optim``)
change the parameters' values in place. ``train`` builds the graph *once*, with
placeholders for the batch, and runs it with an ``Executor`` for every batch: the
define-then-run style, which saves rebuilding the graph in Python at every step.

>>> from autodiff import data, optim
>>> x, y = data.xor()
>>> model = MLP([2, 8, 2], activation="tanh", seed=0)
>>> history = train(model, cross_entropy, optim.Adam(model.parameters(), lr=0.05),
...                 x, y, epochs=300, progress=False)
>>> accuracy(model, x, y)
1.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import backend
from ..core.errors import ShapeError
from ..core.graph import Node, TensorLeaf, Variable, constant, tensor
from ..ops import (
    avg_pool2d,
    conv2d,
    count,
    dropout,
    flatten,
    layer_norm,
    matmul,
    max_pool2d,
    mean,
    relu,
    reshape,
    sigmoid,
    softmax_cross_entropy,
    sqrt,
    tanh,
)
from ..ops.conv import static_shape
from ..system.executor import Executor
from ..system.gradients import collector_paused, gradients
from . import data


class Module:
    """Base class of layers and models: finds parameters, moves them between devices,
    and switches between training and evaluation (``train()``, ``eval()``: dropout and
    batch norm behave differently)."""

    training = True

    def __call__(self, x: Node) -> Node:
        raise NotImplementedError(f"{type(self).__name__} must define __call__(x)")

    def parameters(self) -> list[Node]:
        """The tensor leaves held by this module and its submodules, in definition order."""
        found: list[Node] = []
        for item in self._held():
            if isinstance(item, Module):
                found.extend(item.parameters())
            elif isinstance(item, Node) and isinstance(item.op, TensorLeaf):
                found.append(item)
        return found

    def modules(self) -> list[Module]:
        """This module and every module inside it."""
        found: list[Module] = [self]
        for item in self._held():
            if isinstance(item, Module):
                found.extend(item.modules())
        return found

    def _held(self) -> Iterator[Any]:
        """What this module holds, in definition order, lists and tuples opened."""
        for value in vars(self).values():
            yield from value if isinstance(value, list | tuple) else [value]

    def train(self, mode: bool = True) -> Module:
        """Training mode (the default) for this module and those inside; returns it."""
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        """Evaluation mode: dropout off, batch norm with its running statistics."""
        return self.train(False)

    @property
    def device(self) -> str:
        params = self.parameters()
        return backend.device_of(params[0].value) if params else "cpu"

    def to(self, device: str) -> Module:
        """Move every parameter to ``device`` ('cpu' or 'gpu'); returns the module."""
        for param in self.parameters():
            param.value = backend.to_device(param.value, device)
        return self


class Linear(Module):
    """y = x @ W + b, with W of shape (n_in, n_out) and b of shape (n_out,).

    ``init="he"`` draws W with standard deviation sqrt(2 / n_in), which keeps the scale
    of activations steady through ReLU layers; ``"xavier"`` uses sqrt(2 / (n_in +
    n_out)), suited to tanh and sigmoid. Biases start at zero.
    """

    def __init__(
        self,
        n_in: int,
        n_out: int,
        *,
        bias: bool = True,
        init: str = "he",
        dtype: str = "float32",
        device: str | None = None,
        seed: int = 0,
        name: str = "linear",
    ):
        scales = {"he": (2 / n_in) ** 0.5, "xavier": (2 / (n_in + n_out)) ** 0.5}
        if init not in scales:
            raise ValueError(f"Linear: init must be one of {sorted(scales)}, got {init!r}.")
        device = backend.leaf_device(None, device)
        weight = backend.random_normal((n_in, n_out), dtype, device, seed) * scales[init]
        self.weight = tensor(weight, name=f"{name}.weight")
        zeros = backend.namespace(weight).zeros_like(weight[0])  # (weight[0] * 0 gives -0s)
        self.bias = tensor(zeros, name=f"{name}.bias") if bias else None

    def __call__(self, x: Node) -> Node:
        y = matmul(x, self.weight)
        return y + self.bias if self.bias is not None else y


class Conv2d(Module):
    """y = conv2d(x, W) + b on images (N, C, H, W), W of shape (F, C, k, k), b of shape (F,).

    W starts He-scaled (standard deviation sqrt(2 / (C k k)), the inputs each output
    reads); biases at zero. ``ad.conv2d`` is im2col and one matrix product.
    """

    def __init__(
        self,
        channels: int,
        filters: int,
        kernel: int,
        *,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        bias: bool = True,
        dtype: str = "float32",
        device: str | None = None,
        seed: int = 0,
        name: str = "conv",
    ):
        device = backend.leaf_device(None, device)
        shape = (filters, channels, kernel, kernel)
        scale = (2 / (channels * kernel * kernel)) ** 0.5
        weight = backend.random_normal(shape, dtype, device, seed) * scale
        self.weight = tensor(weight, name=f"{name}.weight")
        zeros = backend.namespace(weight).zeros_like(weight[:, 0, 0, 0])
        self.bias = tensor(zeros, name=f"{name}.bias") if bias else None
        self.stride, self.padding, self.dilation = stride, padding, dilation

    def __call__(self, x: Node) -> Node:
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)


class MaxPool2d(Module):
    """The largest value of each ``kernel`` x ``kernel`` window, per channel."""

    def __init__(self, kernel: int, stride: int | None = None, padding: int = 0):
        self.kernel, self.stride, self.padding = kernel, stride, padding

    def __call__(self, x: Node) -> Node:
        return max_pool2d(x, self.kernel, self.stride, self.padding)


class AvgPool2d(MaxPool2d):
    """The mean of each ``kernel`` x ``kernel`` window, per channel."""

    def __call__(self, x: Node) -> Node:
        return avg_pool2d(x, self.kernel, self.stride, self.padding)


class Flatten(Module):
    """Each example's axes merged into one: (N, C, H, W) -> (N, C*H*W), for a Linear layer."""

    def __call__(self, x: Node) -> Node:
        return flatten(x, start=1)


class Dropout(Module):
    """Zero each element with probability ``p`` while training (the others scaled by
    1 / (1 - p)); the identity in evaluation (``model.eval()``). A new mask every step,
    also in a graph built once: the mask is a node of the graph (``ad.dropout``)."""

    def __init__(self, p: float = 0.5, seed: int = 0):
        self.p = p
        self.rng = np.random.default_rng(seed)

    def __call__(self, x: Node) -> Node:
        return dropout(x, self.p, training=self.training, seed=self.rng)


class LayerNorm(Module):
    """Each example normalised over its last axis (mean 0, variance 1), then scaled by
    ``gamma`` and shifted by ``beta`` (parameters of shape (features,))."""

    def __init__(self, features: int, *, eps: float = 1e-5, dtype: str = "float32", device=None):
        device = backend.leaf_device(None, device)
        ones = backend.asarray(np.ones(features, dtype), device=device)
        self.gamma = tensor(ones, name="layernorm.gamma")
        self.beta = tensor(ones * 0, name="layernorm.beta")
        self.eps = eps

    def __call__(self, x: Node) -> Node:
        return layer_norm(x, self.gamma, self.beta, axis=-1, eps=self.eps)


class BatchNorm(Module):
    """Batch normalisation per channel (axis 1 of (N, C) or (N, C, H, W) inputs), then a
    scale ``gamma`` and shift ``beta`` per channel (parameters).

    Training: each channel normalised with its batch's mean and variance, as
    ``ad.batch_norm``; those are also kept as running averages (``momentum``; the
    variance unbiased, as PyTorch keeps it). Evaluation (``model.eval()``): the running
    averages instead, so an example's output no longer depends on its batch.
    """

    def __init__(
        self,
        channels: int,
        *,
        momentum: float = 0.1,
        eps: float = 1e-5,
        dtype: str = "float32",
        device: str | None = None,
        name: str = "batchnorm",
    ):
        device = backend.leaf_device(None, device)
        ones = backend.asarray(np.ones(channels, dtype), device=device)
        self.gamma = tensor(ones, name=f"{name}.gamma")
        self.beta = tensor(ones * 0, name=f"{name}.beta")
        self.running_mean, self.running_var = ones * 0, ones.copy()  # arrays: not trained
        self.momentum, self.eps = momentum, eps
        # The last training call's batch mean, variance and count per channel: nodes that
        # a graph built once (nn.train) computes at every step, for update_running.
        self.statistics: tuple[Node, Node, Node] | None = None

    def __call__(self, x: Node) -> Node:
        shape = static_shape(x)
        if shape is None or len(shape) < 2:
            raise ShapeError(
                f"BatchNorm: x needs a batch axis and a channel axis, got shape {shape}."
            )
        per_channel = (1, -1) + (1,) * (len(shape) - 2)
        if self.training:
            axes = tuple(a for a in range(len(shape)) if a != 1)
            batch_mean = mean(x, axes, keepdims=True)
            centred = x - batch_mean
            variance = mean(centred * centred, axes, keepdims=True)
            self.statistics = (batch_mean, variance, count(x, axes))
            if batch_mean.value is not None:  # define-by-run: the values are here now
                self.update_running(*(node.value for node in self.statistics))
        else:
            centred = x - constant(self.running_mean.reshape(per_channel))
            variance = constant(self.running_var.reshape(per_channel))
        y = centred / sqrt(variance + self.eps)
        return y * reshape(self.gamma, per_channel) + reshape(self.beta, per_channel)

    def update_running(self, batch_mean: Any, variance: Any, n: Any) -> None:
        """Move the running averages towards a batch's statistics (in place)."""
        # n may be on the GPU: computed there, so that the step never waits for it
        unbiased = variance.reshape(-1) * (n / backend.namespace(n).maximum(n - 1, 1))
        self.running_mean *= 1 - self.momentum
        self.running_mean += self.momentum * batch_mean.reshape(-1)
        self.running_var *= 1 - self.momentum
        self.running_var += self.momentum * unbiased


class Sequential(Module):
    """Layers applied one after another; a layer is a Module or a function of a Node
    (``ad.relu``, ``lambda x: x.reshape((-1, 1, 8, 8))``).

    >>> import autodiff as ad
    >>> model = Sequential(Linear(4, 8), ad.relu, Linear(8, 2, seed=1))
    >>> model(ad.tensor(np.ones((3, 4), "float32"))).shape
    (3, 2)
    """

    def __init__(self, *layers: Module | Callable[[Node], Node]):
        self.layers = list(layers)

    def __call__(self, x: Node) -> Node:
        for layer in self.layers:
            x = layer(x)
        return x


ACTIVATIONS: dict[str, Callable[[Node], Node]] = {"relu": relu, "tanh": tanh, "sigmoid": sigmoid}


class MLP(Module):
    """A multilayer perceptron: ``sizes = [inputs, hidden..., outputs]``.

    Hidden layers apply ``activation``; the last layer is linear (logits for
    ``cross_entropy``, or predictions for ``mse_loss``).

    >>> model = MLP([64, 32, 10])
    >>> [tuple(p.shape) for p in model.parameters()]
    [(64, 32), (32,), (32, 10), (10,)]
    """

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str | Callable[[Node], Node] = "relu",
        *,
        dtype: str = "float32",
        device: str | None = None,
        seed: int = 0,
    ):
        if len(sizes) < 2:
            raise ValueError(f"MLP: sizes needs an input and an output size, got {sizes}.")
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(
                    f"MLP: unknown activation {activation!r}; use one of "
                    f"{sorted(ACTIVATIONS)} or pass a function of a Node."
                )
            init = "he" if activation == "relu" else "xavier"
            activation = ACTIVATIONS[activation]
        else:
            init = "xavier"
        self.activation = activation
        self.layers = [
            Linear(a, b, init=init, dtype=dtype, device=device, seed=seed + i, name=f"layer{i}")
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))
        ]

    def __call__(self, x: Node) -> Node:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


# -- losses and metrics --------------------------------------------------------------------


def mse_loss(prediction: Node, target: Any) -> Node:
    """Mean squared error, averaged over every entry: mean((prediction - target)**2)."""
    return mean((prediction - target) ** 2)


def cross_entropy(logits: Node, labels: Any) -> Node:
    """Softmax cross-entropy averaged over the batch (``ad.softmax_cross_entropy``)."""
    return softmax_cross_entropy(logits, labels)


def accuracy(model: Module, x: Any, y: Any, batch_size: int = 4096) -> float:
    """The fraction of rows of ``x`` whose largest logit is at the label ``y`` (the model
    in evaluation mode)."""
    device, training = model.device, model.training
    model.eval()  # no dropout; batch norm with its running statistics
    correct = 0
    try:
        for start in range(0, len(x), batch_size):
            logits = model(constant(x[start : start + batch_size], device=device)).value
            xp = backend.namespace(logits)
            labels = backend.to_device(y[start : start + batch_size], device)
            correct += int((xp.argmax(logits, axis=-1) == labels).sum())
    finally:
        model.train(training)
    return correct / len(x)


# -- training --------------------------------------------------------------------------------


@dataclass
class History:
    """What ``train`` measured: the loss at every step and its mean over each epoch."""

    loss: list[float] = field(default_factory=list)
    epoch_loss: list[float] = field(default_factory=list)


def _step_function(model: Module, loss_fn: Callable, x: Any, y: Any, compiled: bool, capture: bool):
    """A function (x_batch, y_batch) -> [loss, *parameter gradients] as arrays."""
    params = model.parameters()
    if not compiled:  # define-by-run: a new graph for every batch

        def rebuild_and_run(xb, yb):
            with collector_paused():  # thousands of new nodes a step, no cycles
                loss = loss_fn(model(constant(xb)), constant(yb))
                grads = gradients(loss, params, retain_graph=False)  # nobody sees the graph
                return [loss.value, *[g.value for g in grads]]

        return rebuild_and_run
    x_var = Variable("x", shape=(None, *x.shape[1:]), dtype=x.dtype)
    y_var = Variable("y", shape=(None, *y.shape[1:]), dtype=y.dtype)
    loss = loss_fn(model(x_var), y_var)
    # Batch norm layers' batch statistics come out too, for their running averages.
    norms = [m for m in model.modules() if isinstance(m, BatchNorm) and m.statistics]
    statistics = [node for m in norms for node in m.statistics or ()]
    # On the GPU each run of elementwise ops becomes one kernel (autodiff/fusion.py), and
    # with capture the step's kernels are recorded once and replayed (autodiff/capture.py).
    on_gpu = model.device == "gpu"
    outputs = [loss, *gradients(loss, params), *statistics]
    executor = Executor(outputs, fuse=on_gpu, capture=capture and on_gpu)

    def run(xb, yb):
        values = executor.run({x_var: xb, y_var: yb})
        for k, norm in enumerate(norms):
            norm.update_running(*values[1 + len(params) + 3 * k :][:3])
        return values[: 1 + len(params)]

    return run


def train(
    model: Module,
    loss_fn: Callable[[Node, Any], Node],
    optimizer: Any,
    x: Any,
    y: Any,
    *,
    epochs: int = 1,
    batch_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    progress: bool = True,
    compiled: bool = True,
    capture: bool = True,
) -> History:
    """Fit ``model`` to ``(x, y)``: ``epochs`` passes over shuffled batches.

    ``loss_fn(model_output, labels)`` builds the loss; ``optimizer`` (from
    ``autodiff.optim``) updates the model's parameters. With ``compiled=True`` the
    graph is built once and run per batch; ``compiled=False`` rebuilds it every step
    (define-by-run), which is slower but lets the model change between steps. On the GPU
    the compiled step is recorded as CUDA graphs and replayed (``capture=False``: not).
    Batches go to the model's device. ``progress`` shows a tqdm bar with the epoch's loss.
    """
    from tqdm.auto import tqdm  # imported here: it is slow to import, and only train needs it

    model.train()  # dropout on; batch norm with the batch's statistics
    step = _step_function(model, loss_fn, x, y, compiled, capture)
    history = History()
    steps_per_epoch = -(-len(x) // (batch_size or len(x)))
    bar = tqdm(total=epochs * steps_per_epoch, disable=not progress, desc="training")
    device, shuffles = model.device, backend.namespace().random.default_rng(seed)
    for _ in range(epochs):
        losses = []  # device scalars: read back once per epoch, not once per step
        for xb, yb in data.batches(x, y, batch_size, shuffle, shuffles, device):
            loss, *grads = step(xb, yb)
            optimizer.step(grads)
            losses.append(loss)
            if progress:
                bar.update()
        if device == "gpu":  # one copy to the host for the epoch
            losses = backend.to_numpy(backend.namespace(*losses).stack(losses)).tolist()
        history.loss.extend(float(loss) for loss in losses)
        history.epoch_loss.append(sum(history.loss[-len(losses) :]) / len(losses))
        if progress:
            bar.set_postfix(loss=f"{history.epoch_loss[-1]:.4f}")
    bar.close()
    return history
