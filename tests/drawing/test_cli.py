"""`python -m autodiff render`: figures from expressions; refused expressions run nothing."""

import subprocess
import sys

import pytest

from autodiff.__main__ import main
from autodiff.expression import ExpressionError, parse


def render(capsys, *args):
    status = main(["render", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_side_by_side_with_values(capsys, tmp_path):
    target = tmp_path / "classic.svg"
    status, out, err = render(capsys, "x**2*y + y + 2", "--at", "x=3", "y=4", "-o", str(target))
    assert (status, out.strip(), err) == (0, str(target), "")
    svg = target.read_text()
    assert "<svg" in svg and "adjoint of x" in svg and "= 24" in svg


@pytest.mark.parametrize("mode", ["forward", "side-by-side"])
def test_modes_write_dot(capsys, tmp_path, mode):
    target = tmp_path / "f.dot"
    status, _, _ = render(capsys, "x*y + sin(x)", "--wrt", "x", "--mode", mode, "-o", str(target))
    assert status == 0
    assert ("cluster_gradient" in target.read_text()) == (mode == "side-by-side")


def test_matmul_layer_with_arrays(capsys, tmp_path):
    target = tmp_path / "layer.dot"
    args = ["tanh(matmul(x, W) + b)", "--at", "x=[[1, 2]]", "W=[[1, 0], [0, 1]]", "b=[0.5, 0.5]"]
    status, _, err = render(capsys, *args, "--wrt", "W", "b", "-o", str(target))
    assert status == 0, err
    assert "adjoint of W" in target.read_text()


def test_steps_write_one_file_each(capsys, tmp_path):
    status, out, _ = render(capsys, "x*sin(x)", "--mode", "steps", "-o", str(tmp_path / "s.svg"))
    assert status == 0
    assert out.split() == [str(tmp_path / f"s-0{i}.svg") for i in (1, 2, 3)]


REFUSED = [
    ("x.T", "attribute access"),
    ("__import__('os').system('touch {marker}')", "refused calling a method"),
    ("open('{marker}', 'w')", "refused a call of 'open'"),
    ("eval('1')", "refused a call of 'eval'"),
    ("import os", "not a valid expression"),
    ("lambda: 1", "refused lambda"),
    ("(lambda: 1)()", "refused calling this"),
    ("x[0]", "refused indexing"),
    ("[x for x in y]", "refused comprehensions"),
    ("'text'", "refused 'text'"),
    ("x if y else 1", "refused if-else"),
    ("x < y", "refused comparisons"),
    ("(z := 1)", "refused assignment"),
    ("sin(x, axis=0)", "refused keyword arguments"),
    ("sin(*x)", "refused starred"),
    ("x % 2", "refused the operator %"),
    ("sin + 1", "'sin' is a function"),
    ("sin(x, y)", "sin(x): too many positional arguments"),
    ("x" * 3000, "at most 2000"),
]


@pytest.mark.parametrize("expression, message", REFUSED)
def test_refused_expressions_run_nothing(capsys, tmp_path, expression, message):
    marker = tmp_path / "executed"
    target = tmp_path / "f.svg"
    status, out, err = render(capsys, expression.format(marker=marker), "-o", str(target))
    assert status == 2 and out == ""
    assert err.startswith("error: ") and message in err
    assert not marker.exists() and not target.exists()


def test_the_message_lists_what_is_allowed():
    with pytest.raises(ExpressionError, match=r"may use only names, numbers.*sin"):
        parse("x.T")


@pytest.mark.parametrize(
    "args, message",
    [
        (["x*y", "--wrt", "z"], "--wrt z: the expression has no variable 'z' (x, y)"),
        (["x*y", "--at", "x=three"], "--at x: 'three' is not a number or a list"),
        (["x*y", "--at", "x"], "write NAME=VALUE"),
        (["x*y", "--at", "z=1"], "--at names z, which the expression does not use"),
    ],
)
def test_arguments_that_do_not_fit(capsys, tmp_path, args, message):
    status, _, err = render(capsys, *args, "-o", str(tmp_path / "f.svg"))
    assert status == 2 and message in err


def test_unknown_suffix(capsys, tmp_path):
    status, _, err = render(capsys, "x*y", "-o", str(tmp_path / "f.jpg"))
    assert status == 2 and ".svg, .png, .pdf or .dot" in err


def test_a_graph_that_cannot_be_computed(capsys, tmp_path):
    status, _, err = render(
        capsys, "matmul(x, y)", "--at", "x=1", "y=2", "-o", str(tmp_path / "f.svg")
    )
    assert status == 1 and "cannot draw 'matmul(x, y)'" in err and "matmul" in err


def test_renderer_dot_without_dot_says_what_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    status, _, err = render(capsys, "x*y", "--renderer", "dot", "-o", str(tmp_path / "f.png"))
    assert status == 1 and "apt install graphviz" in err


def test_help_shows_examples():
    result = subprocess.run(
        [sys.executable, "-m", "autodiff", "render", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "examples:" in result.stdout and "--wrt x y -o fig.svg" in result.stdout


def test_parse_uses_given_leaves():
    import autodiff as ad

    x = ad.tensor(2.0, name="x")
    y, names = parse("x * exp(y) - 3", {"x": x})
    assert names["x"] is x and names["y"].op.name == "placeholder"
    assert ad.evaluate(y, {names["y"]: 0.0}) == pytest.approx(-1.0)
