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
