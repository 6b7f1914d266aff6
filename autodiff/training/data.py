"""Small datasets for the training demos, and a batch iterator.

All return ``(x, y)``: float features (float32 by default) and integer class labels, as
NumPy arrays; ``batches`` moves each batch to the device you train on.

* ``xor()``: the four points no linear model separates.
* ``two_moons(n)``: two interleaved half circles with noise, generated here.
* ``digits()``: 1797 handwritten digits, 8x8 pixels with values 0..16, ten classes. It
  is the test set of the UCI "Optical Recognition of Handwritten Digits" data set
  (E. Alpaydin and C. Kaynak, 1998), licensed CC BY 4.0, as distributed with
  scikit-learn. It ships with this package as ``datasets/digits.npz``
  (``datasets/README.md`` says more).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import backend

DATA_DIR = Path(__file__).parent / "datasets"


def xor(dtype: str = "float32") -> tuple[Any, Any]:
    """The XOR problem: inputs (4, 2), labels 0 1 1 0.

    >>> x, y = xor()
    >>> x.tolist(), y.tolist()
    ([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], [0, 1, 1, 0])
    """
    xp = backend.namespace()
    x = xp.asarray([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=dtype)
    return x, xp.asarray([0, 1, 1, 0], dtype="int64")


def two_moons(
    n: int = 200, noise: float = 0.1, seed: int = 0, dtype: str = "float32"
) -> tuple[Any, Any]:
    """``n`` points on two interleaved half circles (n // 2 each), Gaussian ``noise``.

    >>> x, y = two_moons(100)
    >>> x.shape, int(y.sum())
    ((100, 2), 50)
    """
    xp = backend.namespace()
    rng = xp.random.default_rng(seed)
    half = n // 2
    angle_a = xp.linspace(0, xp.pi, n - half)
    angle_b = xp.linspace(0, xp.pi, half)
    upper = xp.stack([xp.cos(angle_a), xp.sin(angle_a)], axis=1)
    lower = xp.stack([1 - xp.cos(angle_b), 0.5 - xp.sin(angle_b)], axis=1)
    x = xp.concatenate([upper, lower]) + noise * rng.standard_normal((n, 2))
    y = xp.concatenate([xp.zeros(n - half, dtype="int64"), xp.ones(half, dtype="int64")])
    order = rng.permutation(n)
    return x[order].astype(dtype), y[order]


def digits(flatten: bool = True, dtype: str = "float32") -> tuple[Any, Any]:
    """The 8x8 handwritten digits, pixels scaled to [0, 1]: x (1797, 64), y (1797,).

    >>> x, y = digits()
    >>> x.shape, sorted(set(y.tolist())) == list(range(10)), float(x.max())
    ((1797, 64), True, 1.0)
    """
    xp = backend.namespace()
    with xp.load(DATA_DIR / "digits.npz") as archive:
        images, labels = archive["images"], archive["labels"]
    x = images.astype(dtype) / 16
    return (x.reshape(len(x), -1) if flatten else x), labels.astype("int64")


def train_test_split(x: Any, y: Any, test_fraction: float = 0.2, seed: int = 0) -> tuple:
    """``(x_train, y_train, x_test, y_test)`` after one shuffle with ``seed``.

    >>> x_train, y_train, x_test, y_test = train_test_split(*digits())
    >>> len(x_train), len(x_test)
    (1438, 359)
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"train_test_split: test_fraction must be in (0, 1), got {test_fraction}.")
    if len(x) != len(y):
        raise ValueError(f"train_test_split: {len(x)} inputs but {len(y)} labels.")
    order = backend.namespace().random.default_rng(seed).permutation(len(x))
    n_test = round(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def batches(
    x: Any,
    y: Any,
    batch_size: int | None = None,
    shuffle: bool = True,
    seed: Any = 0,
    device: str | None = None,
) -> Iterator[tuple[Any, Any]]:
    """One epoch of ``(x_batch, y_batch)`` on ``device``; every sample exactly once.

    The last batch may be smaller. ``batch_size=None`` gives the whole set as one batch.
    ``seed``: an int, or a random generator to draw the shuffle from (``nn.train`` makes
    one per run: making a generator costs more than a small model's step).

    >>> [len(xb) for xb, yb in batches(*xor(), batch_size=3)]
    [3, 1]
    """
    if len(x) != len(y):
        raise ValueError(f"batches: {len(x)} inputs but {len(y)} labels.")
    n = len(x)
    batch_size = n if batch_size is None else batch_size
    if batch_size < 1:
        raise ValueError(f"batches: batch_size must be at least 1, got {batch_size}.")
    xp = backend.namespace()
    if shuffle:
        rng = seed if hasattr(seed, "permutation") else xp.random.default_rng(seed)
        order = rng.permutation(n)
    else:
        order = xp.arange(n)
    device = device or "cpu"
    # Batches are cut where they will be used: on the GPU, the data set goes there once
    # per epoch, not once per batch (each copy from the host would wait for the GPU).
    x, y, order = (backend.to_device(a, device) for a in (x, y, order))
    for start in range(0, n, batch_size):
        index = order[start : start + batch_size]
        yield x[index], y[index]
