"""Executor(capture=True): a compiled run recorded as CUDA graphs, then replayed.

On a real GPU these run CuPy's stream capture; on the CuPy double (``AUTODIFF_FAKE_GPU=1
pytest -m gpu``) the double records each kernel over the buffers it reads and writes and
a launch runs them again, so a replay that read a stale buffer, or a value the
recording never computed (the double fills those with NaN), fails here too.
"""

import numpy as np
import pytest

import autodiff as ad
from autodiff import backend, nn, optim
from autodiff.graph import Op
from strategies import GPU_TOLERANCE, requires_gpu


def training_graph(batch=4, sizes=(8, 16, 16, 3), seed=0):
    """An MLP's loss and parameter gradients on the GPU, from placeholders."""
    model = nn.MLP(sizes, device="gpu", seed=seed)
    x = ad.Variable("x", shape=(None, sizes[0]), dtype="float32")
    y = ad.Variable("y", shape=(None,), dtype="int64")
    loss = nn.cross_entropy(model(x), y)
    return model, [loss, *ad.gradients(loss, model.parameters())], (x, y)


def batch(rows=4, features=8, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    y = rng.integers(0, classes, rows)
    return backend.to_device(x, "gpu"), backend.to_device(y, "gpu")


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g, w = backend.to_numpy(g), backend.to_numpy(w)
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **GPU_TOLERANCE[np.dtype(w.dtype)])


@requires_gpu
def test_replays_give_what_the_compiled_run_gives_batch_after_batch():
    _, outputs, (x, y) = training_graph()
    compiled, captured = ad.Executor(outputs), ad.Executor(outputs, capture=True)
    for step in range(5):
        xb, yb = batch(seed=step)
        assert_same(captured.run({x: xb, y: yb}), compiled.run({x: xb, y: yb}))
    report = captured.capture_report
    # run 1 is the checked run, run 2 records, runs 3-5 replay
    assert (report.recordings, report.replays, report.not_captured) == (1, 3, None)
    assert report.graphs >= 2 and any("cuBLAS" in why for why in report.run_as_usual)
    assert all(why.startswith("matmul") for why in report.run_as_usual), report.run_as_usual
    assert "replay(s)" in str(report)


@requires_gpu
def test_a_replay_reads_parameters_updated_in_place():
    model, outputs, (x, y) = training_graph()
    twin, twin_outputs, (tx, ty) = training_graph()  # the same weights (seed 0)
    captured, compiled = ad.Executor(outputs, capture=True), ad.Executor(twin_outputs)
    sgd, twin_sgd = optim.SGD(model.parameters(), lr=0.5), optim.SGD(twin.parameters(), lr=0.5)
    for step in range(6):
        xb, yb = batch(seed=step)
        loss, *grads = captured.run({x: xb, y: yb})
        twin_loss, *twin_grads = compiled.run({tx: xb, ty: yb})
        assert_same([loss, *grads], [twin_loss, *twin_grads])
        sgd.step(grads)
        twin_sgd.step(twin_grads)
    assert captured.capture_report.replays == 4
    assert_same([p.value for p in model.parameters()], [p.value for p in twin.parameters()])


@requires_gpu
def test_a_tensor_given_a_new_array_or_a_new_batch_size_is_recorded_again():
    model, outputs, (x, y) = training_graph()
    captured, compiled = ad.Executor(outputs, capture=True), ad.Executor(outputs)
    xb, yb = batch()
    for _ in range(3):
        captured.run({x: xb, y: yb})
    weight = model.parameters()[0]
    weight.value = weight.value * 0.5  # a new array: the recording read the old one
    assert_same(captured.run({x: xb, y: yb}), compiled.run({x: xb, y: yb}))
    small_x, small_y = batch(rows=3, seed=1)
    assert_same(captured.run({x: small_x, y: small_y}), compiled.run({x: small_x, y: small_y}))
    assert_same(captured.run({x: xb, y: yb}), compiled.run({x: xb, y: yb}))  # kept: replayed
    report = captured.capture_report
    assert (report.recordings, report.replays) == (3, 2), str(report)


@requires_gpu
def test_the_outputs_are_the_callers_own():
    _, outputs, (x, y) = training_graph()
    captured = ad.Executor(outputs, capture=True)
    xb, yb = batch()
    runs = [captured.run({x: xb, y: yb}) for _ in range(4)]
    kept = backend.to_numpy(runs[2][1]).copy()
    runs[3][1][...] = 0  # the caller writes into this run's gradient
    np.testing.assert_array_equal(backend.to_numpy(runs[2][1]), kept)  # not into run 3's
    other_x, other_y = batch(seed=5)
    captured.run({x: other_x, y: other_y})  # a replay on another batch
    for run in runs[:3]:  # the checked run, the recording run, a replay: all kept
        for value, first in zip(run, runs[0], strict=True):
            np.testing.assert_array_equal(backend.to_numpy(value), backend.to_numpy(first))
    again = captured.run({x: xb, y: yb})
    np.testing.assert_array_equal(backend.to_numpy(again[1]), kept)
    xb[...] = 0  # and into the array it fed: the recording copied it in
    assert not np.array_equal(backend.to_numpy(captured.run({x: xb, y: yb})[1]), kept)


@requires_gpu
def test_labels_out_of_range_are_reported_after_a_replay_even_if_a_good_batch_follows():
    _, outputs, (x, y) = training_graph()
    captured = ad.Executor(outputs, capture=True)
    xb, yb = batch()
    for _ in range(3):
        captured.run({x: xb, y: yb})
    backend.synchronize()
    bad = yb.copy()
    bad[0] = 7  # three classes
    loss = captured.run({x: xb, y: bad})[0]
    captured.run({x: xb, y: yb})  # a good batch overwrites the recording's flag
    with pytest.raises(ad.DomainError, match="class indices"):
        backend.to_numpy(loss)
    assert captured.capture_report.replays == 3
    backend.synchronize()  # reported once


@requires_gpu
def test_dropout_draws_new_masks_at_every_replay():
    x = ad.Variable("x", shape=(64,), dtype="float32")
    y = ad.dropout(x, p=0.5, seed=np.random.default_rng(0))
    outputs = [y.sum(), *ad.gradients(y.sum(), [x])]
    captured = ad.Executor(outputs, capture=True)
    ones = backend.to_device(np.ones(64, np.float32), "gpu")
    masks = [backend.to_numpy(captured.run({x: ones})[1]) for _ in range(5)]
    assert captured.capture_report.replays == 3
    assert ["dropout_mask" in why for why in captured.capture_report.run_as_usual] == [True]
    assert len({m.tobytes() for m in masks}) == 5, "a replay repeated a mask"
    for mask in masks:
        assert set(np.unique(mask)) <= {0.0, 2.0}


class SameShape(Op, register=False):
    """A test op whose output is shaped like its input; no gradient."""

    def infer(self, x):
        return ad.graph.Spec(x.shape, x.dtype)

    def gradient(self, node, output_grad):
        return [None]


class ScaleByMax(SameShape, register=False):
    """Y = X * max(X), with the max read back on the host (an op that waits for the GPU)
    and checked there."""

    def compute(self, x):
        top = float(x.max())
        if not np.isfinite(top):  # (garbage would fail here: a recording computes none)
            raise ValueError(f"scale_by_max: the max is {top}")
        return x * top


@requires_gpu
def test_an_op_that_waits_for_the_gpu_runs_as_usual_between_graphs():
    x = ad.Variable("x", shape=(3,), dtype="float32")
    y = ad.exp(ScaleByMax.apply(ad.sin(x)))
    captured, compiled = ad.Executor([y], capture=True), ad.Executor([y])
    for step in range(4):
        xb = backend.to_device(np.arange(3, dtype=np.float32) + step, "gpu")
        assert_same(captured.run({x: xb}), compiled.run({x: xb}))
    report = captured.capture_report
    assert report.replays == 2 and report.graphs == 2
    assert [why.split(":")[0] for why in report.run_as_usual] == ["scalebymax"]


@requires_gpu
def test_a_replay_launches_fewer_kernels_than_a_compiled_run():
    fakecupy = pytest.importorskip("fakecupy")  # the double counts the host's launches
    if backend.namespace(batch()[0]) is not fakecupy:
        pytest.skip("counts the launches of the CuPy double (AUTODIFF_FAKE_GPU=1)")
    _, outputs, (x, y) = training_graph()
    compiled, captured = ad.Executor(outputs), ad.Executor(outputs, capture=True)
    xb, yb = batch()
    launches = {}
    for name, executor in (("compiled", compiled), ("captured", captured)):
        for _ in range(3):
            before = fakecupy.launches
            executor.run({x: xb, y: yb})
        launches[name] = fakecupy.launches - before
    # 8 matrix products with their transposes' views, 8 graphs, 2 feeds copied in,
    # 7 outputs copied out, the label check's flag
    assert launches["captured"] < 0.6 * launches["compiled"], launches


def test_on_the_cpu_capture_runs_compiled():
    x = ad.Variable("x")
    executor = ad.Executor([ad.sin(x) * x], capture=True)
    values = [executor.run({x: np.array([1.0, 2.0])})[0] for _ in range(3)]
    np.testing.assert_allclose(values[-1], np.sin([1.0, 2.0]) * [1.0, 2.0])
    assert "CPU" in executor.capture_report.not_captured
    assert executor.capture_report.recordings == 0


def test_capture_takes_neither_a_plan_nor_workers():
    x = ad.Variable("x")
    y = ad.sin(x)
    with pytest.raises(ValueError, match="capture=True"):
        ad.Executor([y], capture=True, workers=2)
    with pytest.raises(ValueError, match="capture=True"):
        ad.Executor([y], ad.memory.plan([y], {x: np.ones(3)}), capture=True)


@requires_gpu
def test_training_on_the_gpu_replays_its_step_and_learns_the_same():
    """nn.train records its compiled step (and the last, smaller batch's) and replays
    them: the same losses and weights as without, batch norm's averages included."""
    x, y = ad.data.digits()
    x, y = x[:200], y[:200]  # batches of 64: three, then one of 8

    def trained(capture):
        model = nn.Sequential(
            nn.Linear(64, 32, device="gpu"),
            nn.BatchNorm(32, device="gpu"),
            ad.relu,
            nn.Linear(32, 10, device="gpu", seed=1),
        )
        history = nn.train(
            model,
            nn.cross_entropy,
            optim.Adam(model.parameters(), lr=0.01),
            x,
            y,
            epochs=3,
            batch_size=64,
            progress=False,
            capture=capture,
        )
        return history.loss, [p.value for p in model.parameters()], model

    losses, weights, model = trained(capture=True)
    plain_losses, plain_weights, plain_model = trained(capture=False)
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5)
    assert_same(weights, plain_weights)
    norm, plain_norm = model.layers[1], plain_model.layers[1]
    assert_same(
        [norm.running_mean, norm.running_var], [plain_norm.running_mean, plain_norm.running_var]
    )


@requires_gpu
def test_a_tensor_given_a_new_array_at_every_run_ends_the_recording():
    w = ad.tensor(np.ones(3, np.float32), device="gpu")
    x = ad.Variable("x", shape=(3,), dtype="float32")
    y = ad.sin(x * w)
    captured = ad.Executor([y], capture=True)
    xb = backend.to_device(np.arange(3, dtype=np.float32), "gpu")
    for step in range(12):
        w.value = w.value + 1  # a new array each step, not updated in place
        got = backend.to_numpy(captured.run({x: xb})[0])
        np.testing.assert_allclose(got, np.sin(np.arange(3) * (step + 2.0)), rtol=1e-6)
    report = captured.capture_report
    assert report.recordings == 8 and "recorded 8 times" in report.not_captured
    assert "in place" in str(report)


class ClipByNorm(SameShape, register=False):
    """Y = X, or X / |X| when |X| > 1: the norm read on the host; may give X itself."""

    def compute(self, x):
        norm = float(backend.namespace(x).sqrt((x * x).sum()))
        return x if norm <= 1.0 else x * (1.0 / norm)


@requires_gpu
def test_a_step_run_as_usual_that_gives_its_input_back_writes_into_its_own_buffer():
    w = ad.tensor(backend.to_device(np.array([0.3, 0.4], np.float32), "gpu"))
    x = ad.Variable("x", shape=(2,), dtype="float32")
    outputs = [ClipByNorm.apply(w), w + 0, ad.exp(ClipByNorm.apply(x))]
    captured, compiled = ad.Executor(outputs, capture=True), ad.Executor(outputs)
    small = backend.to_device(np.array([0.1, 0.2], np.float32), "gpu")
    for _ in range(3):
        assert_same(captured.run({x: small}), compiled.run({x: small}))
    w.value[...] = backend.to_device(np.array([3.0, 4.0], np.float32), "gpu")  # in place
    large = backend.to_device(np.array([3.0, 4.0], np.float32), "gpu")
    assert_same(captured.run({x: large}), compiled.run({x: large}))
    np.testing.assert_array_equal(backend.to_numpy(w.value), [3.0, 4.0])  # w untouched
    assert captured.capture_report.replays == 2


class Positives(Op, register=False):
    """The first k elements of X, k the number of positive ones: a shape set by values."""

    def compute(self, x):
        return x[: int((x > 0).sum())].copy()

    def infer(self, x):
        return ad.graph.Spec(ad.static_shapes.UNKNOWN, x.dtype)

    def gradient(self, node, output_grad):
        return [None]


@requires_gpu
def test_a_shape_that_depends_on_the_values_ends_the_recording_not_the_answer():
    x = ad.Variable("x", shape=(4,), dtype="float32")
    head = Positives.apply(x)
    outputs = [head, ad.sum(head * 2)]
    captured, compiled = ad.Executor(outputs, capture=True), ad.Executor(outputs)
    for values in ([1, 2, -1, -1],) * 3 + ([5, -1, -1, -1], [1, 2, 3, -1]):
        xb = backend.to_device(np.array(values, np.float32), "gpu")
        assert_same(captured.run({x: xb}), compiled.run({x: xb}))
    report = captured.capture_report
    assert report.replays == 1 and "depends on the values" in report.not_captured


@requires_gpu
@pytest.mark.filterwarnings("ignore:divide by zero")  # (1 / 0.0 on the CuPy double)
def test_numbers_fed_are_baked_into_the_recording_each_value_its_own():
    s = ad.tensor(backend.to_device(np.float32(1.0), "gpu"))
    v = ad.Variable("v", shape=(2,), dtype="float32")
    lr = ad.tensor(backend.to_device(np.float32(0.1), "gpu"))
    outputs = [1 / (v * 0 + s), v * lr]
    captured, compiled = ad.Executor(outputs, capture=True), ad.Executor(outputs)
    vb = backend.to_device(np.array([-1.0, 1.0], np.float32), "gpu")
    for zero, rate in [(0.0, 0.1)] * 3 + [(-0.0, 0.1), (0.0, 0.5), (0.0, 0.5)]:
        feed = {s: zero, v: vb, lr: rate}  # (numbers fed to tensors stay numbers)
        assert_same(captured.run(feed), compiled.run(feed))
    report = captured.capture_report
    assert (report.recordings, report.replays, report.not_captured) == (3, 2, None)


def test_the_ops_named_random_are_registered_ops():
    """capture.RANDOM is keyed by op name: a renamed op would be replayed with old draws."""
    assert ad.capture.RANDOM <= set(ad.Op.registry), ad.capture.RANDOM - set(ad.Op.registry)
