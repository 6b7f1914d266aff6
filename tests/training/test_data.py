"""Bundled datasets and the batch iterator."""

import numpy as np
import pytest

from autodiff import data


def test_xor_is_the_truth_table():
    x, y = data.xor()
    assert x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(y, np.logical_xor(x[:, 0], x[:, 1]))


def test_two_moons_is_balanced_noisy_and_reproducible():
    x, y = data.two_moons(301, noise=0.1, seed=3)
    assert x.shape == (301, 2) and np.bincount(y).tolist() == [151, 150]
    again, _ = data.two_moons(301, noise=0.1, seed=3)
    np.testing.assert_array_equal(x, again)
    clean, labels = data.two_moons(200, noise=0.0)
    upper = clean[labels == 0]
    np.testing.assert_allclose(np.hypot(upper[:, 0], upper[:, 1]), 1.0, rtol=1e-6)


def test_digits_are_the_uci_test_set():
    x, y = data.digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32
    assert x.min() == 0.0 and x.max() == 1.0
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    images, _ = data.digits(flatten=False)
    assert images.shape == (1797, 8, 8)
    np.testing.assert_array_equal(images[0].reshape(-1), x[0])


def test_train_test_split_partitions_the_rows():
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    x_train, y_train, x_test, y_test = data.train_test_split(x, y, test_fraction=0.3, seed=1)
    assert len(x_test) == 3 and len(x_train) == 7
    assert sorted(np.concatenate([y_train, y_test]).tolist()) == list(range(10))
    np.testing.assert_array_equal(x_train[:, 0] / 2, y_train)  # rows stay with their labels
    with pytest.raises(ValueError, match="test_fraction"):
        data.train_test_split(x, y, test_fraction=1.0)


@pytest.mark.parametrize("batch_size", [1, 3, 4, 10, None])
def test_batches_cover_every_sample_once(batch_size):
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10)
    seen = []
    for xb, yb in data.batches(x, y, batch_size, shuffle=True, seed=5):
        np.testing.assert_array_equal(xb[:, 0] / 2, yb)
        assert len(yb) <= (batch_size or 10)
        seen.extend(yb.tolist())
    assert sorted(seen) == list(range(10))


def test_batches_shuffle_by_seed_and_can_keep_order():
    x, y = np.zeros((8, 1)), np.arange(8)
    in_order = [yb.tolist() for _, yb in data.batches(x, y, 4, shuffle=False)]
    assert in_order == [[0, 1, 2, 3], [4, 5, 6, 7]]
    first = [yb.tolist() for _, yb in data.batches(x, y, 4, seed=1)]
    second = [yb.tolist() for _, yb in data.batches(x, y, 4, seed=2)]
    assert first != second and first != in_order


def test_batches_refuse_mismatched_inputs():
    with pytest.raises(ValueError, match="3 inputs but 2 labels"):
        list(data.batches(np.zeros((3, 1)), np.zeros(2), 2))
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        list(data.batches(np.zeros((3, 1)), np.zeros(3), 0))
