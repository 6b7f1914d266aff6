"""Layers, models and training: shapes, initialisation, and models that really learn."""

import numpy as np
import pytest

import autodiff as ad
from autodiff import data, nn, optim
from strategies import DEVICES


def test_linear_computes_x_w_plus_b():
    layer = nn.Linear(3, 2, seed=1)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    out = layer(ad.tensor(x))
    np.testing.assert_allclose(out.value, x @ layer.weight.value + layer.bias.value, rtol=1e-6)
    assert out.dtype == np.float32
    assert [p.name for p in layer.parameters()] == ["linear.weight", "linear.bias"]


@pytest.mark.parametrize("init, std", [("he", (2 / 400) ** 0.5), ("xavier", (2 / 600) ** 0.5)])
def test_initialisation_scales(init, std):
    weight = nn.Linear(400, 200, init=init, dtype="float64").weight.value
    assert weight.std() == pytest.approx(std, rel=0.02)
    assert abs(weight.mean()) < 0.05 * std


def test_mlp_is_layers_with_activations_between():
    model = nn.MLP([4, 5, 3], activation="tanh", dtype="float64", seed=2)
    w1, b1, w2, b2 = [p.value for p in model.parameters()]
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    expected = np.tanh(x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(model(ad.tensor(x)).value, expected, rtol=1e-12)


def test_parameters_are_found_in_nested_modules_and_lists():
    class Two(nn.Module):
        def __init__(self):
            self.blocks = [nn.Linear(2, 2, name="a"), nn.Linear(2, 1, bias=False, name="b")]
            self.scale = ad.tensor(1.0, name="scale")
            self.not_a_parameter = ad.constant(2.0)

        def __call__(self, x):
            return self.blocks[1](self.blocks[0](x)) * self.scale

    names = [p.name for p in Two().parameters()]
    assert names == ["a.weight", "a.bias", "b.weight", "scale"]


def test_losses():
    pred, target = ad.tensor([[1.0, 2.0], [3.0, 5.0]]), np.array([[1.0, 0.0], [3.0, 4.0]])
    assert float(nn.mse_loss(pred, target).value) == pytest.approx((4 + 1) / 4)
    logits, labels = ad.tensor([[2.0, 0.0], [0.0, 0.0]]), np.array([0, 1])
    expected = (np.log(1 + np.exp(-2.0)) + np.log(2)) / 2
    assert float(nn.cross_entropy(logits, labels).value) == pytest.approx(expected)


@pytest.mark.parametrize("device", DEVICES)
def test_xor_is_learned_on_each_device(device):
    x, y = data.xor()
    model = nn.MLP([2, 8, 2], activation="tanh", device=device, seed=0)
    assert model.device == device
    opt = optim.Adam(model.parameters(), lr=0.05)
    history = nn.train(model, nn.cross_entropy, opt, x, y, epochs=300, progress=False)
    assert nn.accuracy(model, x, y) == 1.0
    assert history.loss[-1] < 0.05 < history.loss[0]
    assert all(p.value.dtype == np.float32 for p in model.parameters())


def test_digits_reach_97_percent_on_held_out_data():
    x_train, y_train, x_test, y_test = data.train_test_split(*data.digits(), seed=0)
    model = nn.MLP([64, 64, 10], seed=0)
    opt = optim.Adam(model.parameters(), lr=0.01)
    history = nn.train(
        model, nn.cross_entropy, opt, x_train, y_train, epochs=10, batch_size=64, progress=False
    )
    assert len(history.loss) == 10 * 23 and len(history.epoch_loss) == 10
    assert history.epoch_loss[-1] < history.epoch_loss[0] / 5
    assert nn.accuracy(model, x_test, y_test) >= 0.97


def test_compiled_and_rebuilt_training_take_identical_steps():
    x, y = data.two_moons(64, seed=1)
    histories = []
    for compiled in (True, False):
        model = nn.MLP([2, 16, 2], seed=4)
        opt = optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        histories.append(
            nn.train(
                model,
                nn.cross_entropy,
                opt,
                x,
                y,
                epochs=5,
                batch_size=16,
                progress=False,
                compiled=compiled,
            ).loss
        )
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-6)


def test_regression_with_mse():
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(-1, 1)
    y = np.sin(3 * x)
    model = nn.MLP([1, 32, 1], activation="tanh", seed=0)
    history = nn.train(
        model,
        nn.mse_loss,
        optim.Adam(model.parameters(), lr=0.02),
        x,
        y,
        epochs=400,
        progress=False,
    )
    assert history.loss[-1] < 0.01 * history.loss[0]


def test_progress_bar_reports_the_loss(capsys):
    x, y = data.xor()
    model = nn.MLP([2, 4, 2], seed=0)
    nn.train(model, nn.cross_entropy, optim.SGD(model.parameters(), lr=0.1), x, y, epochs=3)
    err = capsys.readouterr().err
    assert "training" in err and "loss=" in err and "3/3" in err


def test_moving_a_model_to_the_cpu_keeps_its_values():
    model = nn.MLP([2, 3, 1], seed=0)
    before = [p.value.copy() for p in model.parameters()]
    assert model.to("cpu") is model and model.device == "cpu"
    for b, p in zip(before, model.parameters(), strict=True):
        np.testing.assert_array_equal(b, p.value)


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        nn.MLP([2, 2], activation="swish")
    with pytest.raises(ValueError, match="init must be one of"):
        nn.Linear(2, 2, init="zeros")
    with pytest.raises(ValueError, match="input and an output size"):
        nn.MLP([3])


# -- convolutional layers --------------------------------------------------------------------


def digits_cnn(device=None, seed=0):
    """Lecture 4's CNN: two 3x3 convolutions with 2x2 max pooling, dropout, a linear layer."""
    return nn.Sequential(
        lambda t: t.reshape((-1, 1, 8, 8)),
        nn.Conv2d(1, 32, 3, padding=1, device=device, seed=seed),
        ad.relu,
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, device=device, seed=seed + 1),
        ad.relu,
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Dropout(0.5, seed=seed),
        nn.Linear(64 * 2 * 2, 10, device=device, seed=seed + 2),
    )


def test_a_cnn_reads_the_digits_better_than_the_mlp():
    x_train, y_train, x_test, y_test = data.train_test_split(*data.digits(), seed=0)
    mlp = nn.MLP([64, 64, 10], seed=0)
    nn.train(mlp, nn.cross_entropy, optim.Adam(mlp.parameters(), lr=0.01), x_train, y_train,
             epochs=10, batch_size=64, progress=False)  # fmt: skip
    cnn = digits_cnn()
    history = nn.train(cnn, nn.cross_entropy, optim.Adam(cnn.parameters(), lr=0.005),
                       x_train, y_train, epochs=15, batch_size=64, progress=False)  # fmt: skip
    assert history.epoch_loss[-1] < history.epoch_loss[0] / 5
    assert all(p.value.dtype == np.float32 for p in cnn.parameters())
    mlp_accuracy, cnn_accuracy = nn.accuracy(mlp, x_test, y_test), nn.accuracy(cnn, x_test, y_test)
    assert cnn_accuracy > mlp_accuracy, (cnn_accuracy, mlp_accuracy)
    assert cnn.training  # accuracy() switched to evaluation and back


def test_conv_layers_shapes_and_initialisation():
    conv = nn.Conv2d(3, 8, 5, padding=2, seed=0)
    assert conv.weight.shape == (8, 3, 5, 5) and conv.bias.shape == (8,)
    assert np.std(conv.weight.value) == pytest.approx((2 / 75) ** 0.5, rel=0.1)
    x = ad.tensor(np.ones((2, 3, 6, 6), "float32"))
    assert conv(x).shape == (2, 8, 6, 6)
    assert nn.MaxPool2d(2)(conv(x)).shape == (2, 8, 3, 3)
    assert nn.AvgPool2d(3, stride=1)(conv(x)).shape == (2, 8, 4, 4)
    assert nn.Flatten()(conv(x)).shape == (2, 8 * 36)
    norm = nn.LayerNorm(36)
    out = norm(nn.Flatten()(conv(x)).reshape((2, 8, 36))).value
    np.testing.assert_allclose(out.mean(axis=-1), 0, atol=1e-5)


def test_dropout_is_off_in_evaluation_and_on_in_training():
    model = nn.Sequential(nn.Dropout(0.5, seed=0))
    x = ad.tensor(np.ones((4, 100)))
    assert set(np.unique(model(x).value)) == {0.0, 2.0}
    assert model.eval()(x) is x and not model.layers[0].training
    assert model.train()(x) is not x


def test_batch_norm_keeps_running_averages_in_both_training_styles():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(64, 3)) * [1.0, 2.0, 3.0] + [5.0, -1.0, 0.0]).astype("float32")
    y = rng.integers(0, 2, 64)
    running = []
    for compiled in (True, False):
        model = nn.Sequential(nn.BatchNorm(3, momentum=0.5), nn.Linear(3, 2, seed=0))
        out = model(ad.tensor(x)).value  # a define-by-run call updates the averages too
        assert out.shape == (64, 2)
        norm = model.layers[0]
        norm.running_mean[:], norm.running_var[:] = 0, 1
        nn.train(model, nn.cross_entropy, optim.SGD(model.parameters(), lr=1e-9), x, y,
                 epochs=2, batch_size=64, progress=False, compiled=compiled)  # fmt: skip
        running.append((norm.running_mean.copy(), norm.running_var.copy()))
    for mean, var in running:  # two steps at momentum 0.5: 3/4 of the way there
        np.testing.assert_allclose(mean, 0.75 * x.mean(axis=0), rtol=1e-5)
        np.testing.assert_allclose(var, 0.75 * x.var(axis=0, ddof=1) + 0.25, rtol=1e-5)
    model.eval()
    normed = model.layers[0](ad.tensor(x)).value
    expected = (x - running[1][0]) / np.sqrt(running[1][1] + 1e-5)
    np.testing.assert_allclose(normed, expected, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_the_cnn_trains_the_same_on_each_device(device):
    x_train, y_train, _, _ = data.train_test_split(*data.digits(), seed=0)
    x_train, y_train = x_train[:256], y_train[:256]
    losses = []
    for where in ("cpu", device):
        model = digits_cnn(device=where)
        opt = optim.Adam(model.parameters(), lr=0.005)
        history = nn.train(model, nn.cross_entropy, opt, x_train, y_train, epochs=2,
                           batch_size=64, progress=False)  # fmt: skip
        assert model.device == where
        losses.append(history.loss)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-3)
