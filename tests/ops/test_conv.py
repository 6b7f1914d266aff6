"""Convolution, pooling and dropout (autodiff/ops/conv.py): forward values against loops
that follow the definition (and PyTorch where it is installed), gradients against finite
differences, on several stride / padding / dilation combinations. im2col and col2im, the
two ops, are also in the registry-wide tests (tests/shared/strategies.py)."""

import importlib.util

import numpy as np
import pytest

import autodiff as ad
from strategies import assert_same_on_gpu, requires_gpu

HAS_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = "PyTorch is not installed here: the comparisons with torch need it (pip install torch)"

# (stride, padding, dilation): ints or (height, width) pairs
GEOMETRIES = [
    (1, 0, 1),
    (1, 1, 1),
    (2, 1, 1),
    (1, 2, 2),
    (2, 0, 2),
    ((2, 1), (0, 1), (1, 2)),
]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d_loop(x, w, b, stride, padding, dilation):
    """The definition: for each output pixel, the sum over a patch of kernel * image."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, f, oh, ow))
    for i in range(oh):
        for j in range(ow):
            for p in range(kh):
                for q in range(kw):
                    pixel = padded[:, :, i * sh + p * dh, j * sw + q * dw]  # (n, c)
                    out[:, :, i, j] += pixel @ w[:, :, p, q].T
    return out if b is None else out + b[:, None, None]


def pool_loop(x, kernel, stride, padding, reduce, fill):
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(padding)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh = (x.shape[2] + 2 * ph - kh) // sh + 1
    ow = (x.shape[3] + 2 * pw - kw) // sw + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            window = padded[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            out[:, :, i, j] = reduce(window, axis=(2, 3))
    return out


def random_problem(seed=0, n=2, c=3, f=4, h=7, w=6, kernel=(3, 2)):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, c, h, w)),
        rng.standard_normal((f, c, *kernel)),
        rng.standard_normal(f),
    )


# -- conv2d ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stride, padding, dilation", GEOMETRIES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv2d_matches_the_loop_over_output_pixels(stride, padding, dilation, with_bias):
    x, w, b = random_problem()
    b = b if with_bias else None
    out = ad.conv2d(ad.tensor(x), ad.tensor(w), None if b is None else ad.tensor(b),
                    stride=stride, padding=padding, dilation=dilation)  # fmt: skip
    expected = conv2d_loop(x, w, b, stride, padding, dilation)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.value, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride, padding, dilation", GEOMETRIES)
def test_conv2d_gradients_match_finite_differences(stride, padding, dilation):
    x, w, b = random_problem(seed=1, n=2, c=2, f=3, h=6, w=5)

    def f(x, w, b):
        return ad.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation)

    ad.check_grads(f, [x, w, b], order=1)


def test_conv2d_second_derivatives_match_finite_differences():
    x, w, b = random_problem(seed=2, n=1, c=2, f=2, h=4, w=4, kernel=(2, 2))

    def f(x, w, b):
        return ad.tanh(ad.conv2d(x, w, b, stride=2, padding=1))  # tanh: a curved loss

    ad.check_grads(f, [x, w, b], order=2)


def test_conv2d_weight_gradient_is_the_correlation_of_input_and_adjoint():
    """dW[f, c, p, q] = sum over n, i, j of dY[n, f, i, j] * X[n, c, i + p, j + q]: the
    rule a lecture derives, here checked against what the composition gives."""
    x, w, _ = random_problem(seed=3, kernel=(3, 3))
    xt, wt = ad.tensor(x), ad.tensor(w)
    out = ad.conv2d(xt, wt)
    dy = np.random.default_rng(4).standard_normal(out.shape)
    (dw,) = ad.gradients(out, [wt], ad.constant(dy))
    expected = np.zeros_like(w)
    for p in range(3):
        for q in range(3):
            patch = x[:, :, p : p + out.shape[2], q : q + out.shape[3]]
            expected[:, :, p, q] = np.einsum("nfij,ncij->fc", dy, patch)
    np.testing.assert_allclose(dw.value, expected, rtol=1e-12, atol=1e-12)


def test_conv2d_runs_in_symbolic_graphs_with_an_unknown_batch():
    x_value, w_value, b_value = random_problem(seed=5)
    x = ad.Variable("x", shape=(None, 3, 7, 6))
    w, b = ad.tensor(w_value), ad.tensor(b_value)
    out = ad.conv2d(x, w, b, padding=1)
    (dw,) = ad.gradients(out.sum(), [w])
    got, got_dw = ad.evaluate([out, dw], {x: x_value})
    expected = conv2d_loop(x_value, w_value, b_value, 1, 1, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    eager = ad.conv2d(ad.tensor(x_value), w, b, padding=1)
    np.testing.assert_allclose(got_dw, ad.gradients(eager.sum(), [w])[0].value, rtol=1e-12)


def test_a_symbolic_stack_of_layers_runs_the_same_optimised_and_planned():
    """conv -> relu -> pool -> conv -> batch norm on a placeholder: the later layers learn
    their input's shape from the shape rules (no values yet), and the graph passes and
    the memory plan leave the values and gradients alone."""
    from autodiff import memory

    rng = np.random.default_rng(15)
    x = ad.Variable("x", shape=(None, 2, 6, 6))
    w1, w2 = (
        ad.tensor(rng.standard_normal((3, 2, 3, 3))),
        ad.tensor(rng.standard_normal((4, 3, 2, 2))),
    )
    h = ad.max_pool2d(ad.relu(ad.conv2d(x, w1, padding=1)), 2)
    out = ad.batch_norm(ad.avg_pool2d(ad.conv2d(h, w2), 2, 1))
    loss = (out * out * out).sum()
    outputs = [loss, *ad.gradients(loss, [w1, w2])]
    feed = {x: rng.standard_normal((5, 2, 6, 6))}
    plain = ad.Executor(outputs).run(feed)
    assert plain[1].shape == (3, 2, 3, 3)
    eager_loss = ad.batch_norm(ad.avg_pool2d(ad.conv2d(ad.max_pool2d(ad.relu(
        ad.conv2d(ad.tensor(feed[x]), w1, padding=1)), 2), w2), 2, 1))  # fmt: skip
    np.testing.assert_allclose(plain[0], (eager_loss.value**3).sum(), rtol=1e-12)
    optimised = ad.Executor(outputs, optimize=True).run(feed)
    planned = ad.Executor(outputs, plan=memory.plan(outputs, feed)).run(feed)
    for a, b, c in zip(plain, optimised, planned, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12)
        np.testing.assert_allclose(c, a, rtol=1e-12)


def test_conv2d_keeps_float32():
    x, w, b = (a.astype(np.float32) for a in random_problem())
    xt, wt, bt = ad.tensor(x), ad.tensor(w), ad.tensor(b)
    out = ad.conv2d(xt, wt, bt, padding=1)
    assert out.dtype == np.float32
    assert all(g.value.dtype == np.float32 for g in ad.gradients(out, [xt, wt, bt]))


def test_conv2d_errors_name_the_shapes_and_the_fix():
    x, w, _ = random_problem()
    with pytest.raises(ad.ShapeError, match=r"3 channels .* expect 2"):
        ad.conv2d(ad.tensor(x), ad.tensor(w[:, :2]))
    with pytest.raises(ad.ShapeError, match="does not fit an image"):
        ad.conv2d(ad.tensor(x[:, :, :2, :2]), ad.tensor(w))
    with pytest.raises(ad.ShapeError, match=r"4 axes .*Variable"):
        ad.conv2d(ad.Variable("x"), ad.tensor(w))
    with pytest.raises(ad.ShapeError, match=r"4 axes \(N, C, H, W\)"):
        ad.im2col(ad.tensor(x[0]), kernel=2)


# -- im2col and col2im ------------------------------------------------------------------------


def test_im2col_has_one_row_per_kernel_position():
    x = np.arange(2 * 4 * 4.0).reshape(1, 2, 4, 4)
    columns = ad.im2col(ad.tensor(x), kernel=2, stride=2).value
    assert columns.shape == (4, 2 * 2 * 2)
    # the last position (i, j) = (1, 1): rows 2-3, columns 2-3, of both channels
    np.testing.assert_array_equal(columns[3], [10, 11, 14, 15, 26, 27, 30, 31])


@pytest.mark.parametrize("stride, padding, dilation", GEOMETRIES)
def test_col2im_is_the_transpose_of_im2col(stride, padding, dilation):
    """<im2col(x), c> = <x, col2im(c)>: the two are adjoint linear maps, which is why
    each is the other's gradient."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, 7, 6))
    geometry = dict(kernel=(3, 2), stride=stride, padding=padding, dilation=dilation)
    columns = ad.im2col(ad.tensor(x), **geometry).value
    c = rng.standard_normal(columns.shape)
    back = ad.col2im(ad.tensor(c), ad.constant(np.zeros(x.shape)), **geometry).value
    assert np.vdot(columns, c) == pytest.approx(np.vdot(x, back), rel=1e-12)


def test_im2col_gradient_graph_is_col2im_and_back():
    x = ad.tensor(np.ones((1, 1, 3, 3)))
    (dx,) = ad.gradients(ad.im2col(x, kernel=2).sum(), [x])
    assert dx.op.name == "col2im"
    # each pixel is counted once per patch it lies in
    np.testing.assert_array_equal(dx.value[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])
    (ddx,) = ad.gradients((dx * dx).sum(), [x])
    assert np.all(ddx.value == 0)  # dx does not depend on x: the map is linear


def test_col2im_refuses_columns_of_the_wrong_shape():
    with pytest.raises(ad.ShapeError, match=r"expected \(4, 4\)"):
        ad.col2im(ad.tensor(np.ones((3, 4))), ad.constant(np.zeros((1, 1, 3, 3))), kernel=2)


# -- pooling ---------------------------------------------------------------------------------


POOLS = [(2, None, 0), (3, 1, 1), ((2, 3), (1, 2), (1, 0)), (3, 2, 0)]


@pytest.mark.parametrize("kernel, stride, padding", POOLS)
def test_max_pool_matches_the_loop_and_pads_with_minus_infinity(kernel, stride, padding):
    x = -np.random.default_rng(7).random((2, 3, 7, 6)) - 1  # all negative: a 0 pad would win
    out = ad.max_pool2d(ad.tensor(x), kernel, stride, padding)
    expected = pool_loop(x, kernel, stride or kernel, padding, np.max, -np.inf)
    np.testing.assert_array_equal(out.value, expected)


@pytest.mark.parametrize("kernel, stride, padding", POOLS)
def test_avg_pool_matches_the_loop_counting_padded_zeros(kernel, stride, padding):
    x = np.random.default_rng(8).standard_normal((2, 3, 7, 6))
    out = ad.avg_pool2d(ad.tensor(x), kernel, stride, padding)
    expected = pool_loop(x, kernel, stride or kernel, padding, np.mean, 0.0)
    np.testing.assert_allclose(out.value, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel, stride, padding", POOLS)
def test_pooling_gradients_match_finite_differences(kernel, stride, padding):
    rng = np.random.default_rng(9)
    x = rng.permutation(2 * 2 * 5 * 6).reshape(2, 2, 5, 6) / 8.0  # distinct: no ties
    ad.check_grads(lambda a: ad.max_pool2d(a, kernel, stride, padding), [x], order=2)
    ad.check_grads(lambda a: ad.avg_pool2d(a, kernel, stride, padding), [x], order=2)


def test_max_pool_gradient_goes_to_the_max_of_each_window_and_splits_ties():
    x = ad.tensor(np.array([[[[1.0, 2.0], [4.0, 3.0]], [[5.0, 5.0], [0.0, 1.0]]]]))
    (dx,) = ad.gradients(ad.max_pool2d(x, 2).sum(), [x])
    np.testing.assert_array_equal(dx.value[0, 0], [[0, 0], [1, 0]])
    np.testing.assert_array_equal(dx.value[0, 1], [[0.5, 0.5], [0, 0]])


def test_pooling_refuses_padding_over_half_the_kernel():
    with pytest.raises(ad.ShapeError, match="half the kernel"):
        ad.max_pool2d(ad.tensor(np.ones((1, 1, 4, 4))), 2, padding=2)


# -- dropout ---------------------------------------------------------------------------------


def test_dropout_zeroes_a_fraction_p_and_scales_the_rest():
    x = ad.tensor(np.ones((200, 100)))
    y = ad.dropout(x, p=0.3, seed=0).value
    assert set(np.unique(y)) <= {0.0, 1 / 0.7}
    assert (y == 0).mean() == pytest.approx(0.3, abs=0.02)
    assert y.mean() == pytest.approx(1.0, abs=0.03)  # inverted dropout keeps the mean


def test_dropout_is_reproducible_and_its_gradient_is_the_mask():
    x_value = np.random.default_rng(10).standard_normal((5, 4))
    x = ad.tensor(x_value)
    y1, y2 = ad.dropout(x, 0.5, seed=3), ad.dropout(x, 0.5, seed=3)
    np.testing.assert_array_equal(y1.value, y2.value)
    mask = y1.value / x_value
    (dx,) = ad.gradients(y1, [x])
    np.testing.assert_allclose(dx.value, mask)
    ad.check_grads(lambda a: ad.dropout(a, 0.5, seed=3), [x_value], order=2)


def test_dropout_with_a_generator_draws_fresh_masks():
    rng = np.random.default_rng(11)
    x = ad.tensor(np.ones(50))
    first, second = ad.dropout(x, 0.5, seed=rng), ad.dropout(x, 0.5, seed=rng)
    assert not np.array_equal(first.value, second.value)


def test_dropout_outside_training_is_the_identity_and_p_is_checked():
    x = ad.tensor(np.ones(3))
    assert ad.dropout(x, 0.5, training=False) is x
    for p in (1.0, -0.1, 1.5):
        with pytest.raises(ad.DomainError, match=r"\[0, 1\)"):
            ad.dropout(x, p)


def test_dropout_keeps_float32():
    y = ad.dropout(ad.tensor(np.ones(8), dtype="float32"), 0.25, seed=0)
    assert y.dtype == np.float32


# -- PyTorch ---------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
@pytest.mark.parametrize("stride, padding, dilation", GEOMETRIES)
def test_conv2d_and_its_gradients_match_pytorch(stride, padding, dilation):
    import torch

    x, w, b = random_problem(seed=12)
    leaves = [ad.tensor(a) for a in (x, w, b)]
    out = ad.conv2d(*leaves, stride=stride, padding=padding, dilation=dilation)
    grads = ad.gradients((out * out).sum(), leaves)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    t_out = torch.nn.functional.conv2d(tx, tw, tb, stride, padding, dilation)
    (t_out * t_out).sum().backward()
    np.testing.assert_allclose(out.value, t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    for g, t in zip(grads, (tx, tw, tb), strict=True):
        np.testing.assert_allclose(g.value, t.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(not HAS_TORCH, reason=NO_TORCH)
@pytest.mark.parametrize("kernel, stride, padding", POOLS)
def test_pooling_matches_pytorch(kernel, stride, padding):
    import torch

    x = np.random.default_rng(13).standard_normal((2, 3, 7, 6))
    t = torch.tensor(x)
    for ours, theirs in [
        (ad.max_pool2d, torch.nn.functional.max_pool2d),
        (ad.avg_pool2d, torch.nn.functional.avg_pool2d),
    ]:
        expected = theirs(t, kernel, stride, padding).numpy()
        np.testing.assert_allclose(ours(ad.tensor(x), kernel, stride, padding).value, expected)


# -- on a GPU --------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("stride, padding, dilation", GEOMETRIES[:3])
def test_conv2d_and_pooling_on_the_gpu_match_the_cpu(stride, padding, dilation):
    arrays = random_problem(seed=14)
    cpu = [ad.tensor(a) for a in arrays]
    gpu = [ad.tensor(a, device="gpu") for a in arrays]
    results = []
    for leaves in (cpu, gpu):
        out = ad.conv2d(*leaves, stride=stride, padding=padding, dilation=dilation)
        pooled = ad.max_pool2d(out, 2) + ad.avg_pool2d(out, 3, 1, 1).sum()
        results.append([pooled, *ad.gradients((pooled * pooled).sum(), leaves)])
    for on_gpu, on_cpu in zip(results[1], results[0], strict=True):
        assert on_gpu.device == "gpu"
        assert_same_on_gpu(on_gpu, on_cpu, on_gpu.op.name)


def test_dropout_in_a_graph_built_once_draws_a_new_mask_each_run_and_differentiates_by_it():
    """nn.train builds the graph once: the mask is a node, drawn at every run, and the
    gradient of that run reads the same mask (dX = dY * mask)."""
    x = ad.Variable("x", shape=(None, 50))
    y = ad.dropout(x * 1.0, 0.5, seed=np.random.default_rng(0))
    (gx,) = ad.gradients(ad.sum(y * 3.0), [x])
    run = ad.Executor([y, gx])
    ones = np.ones((4, 50))
    (y1, g1), (y2, g2) = run.run({x: ones}), run.run({x: ones})
    assert not np.array_equal(y1, y2)  # another mask at the second step
    for y_val, g_val in ((y1, g1), (y2, g2)):
        np.testing.assert_array_equal(g_val, 3.0 * y_val)  # mask * dY, the same mask
    assert set(np.unique(y1)) == {0.0, 2.0}
