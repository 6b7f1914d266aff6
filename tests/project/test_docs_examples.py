"""The examples in README.md and docs/ run as written and give what the page says."""

import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_example(page: str, section: str) -> dict:
    """Run the first python code block under ``## section`` of a page; its names."""
    text = (ROOT / page).read_text()
    code = text.split(f"## {section}", 1)[1].split("```python", 1)[1].split("```")[0]
    namespace: dict = {}
    exec(compile(code, f"{page} ({section})", "exec"), namespace)
    return namespace


def test_the_readme_tour_runs():
    namespace = run_example("README.md", "A tour of the API")
    assert float(namespace["dy"].value) == pytest.approx(0.0770037537)
    assert namespace["dw_value"].shape == (3, 2)


def test_the_four_ways_example_runs():
    namespace = run_example("docs/students.md", "The four ways to differentiate")
    assert str(namespace["simple"]) == "2*x*y"
    assert namespace["dual"].value == 42.0 and namespace["dual"].tangent == 24.0
    assert namespace["jac"].tolist() == [24.0, 10.0]
    assert namespace["counter"].passes == 2
    assert [float(g) for g in namespace["grads"]] == [24.0, 10.0]
    swell = namespace["swell"]
    assert swell["derivative"][-1] > 10 * swell["gradient_graph"][-1]


def test_the_training_example_runs():
    namespace = run_example("docs/students.md", "Training")
    assert (
        namespace["nn"].accuracy(namespace["model"], namespace["x_test"], namespace["y_test"])
        > 0.95
    )
    assert len(namespace["history"].epoch_loss) == 10


def test_the_memory_example_runs(capsys):
    namespace = run_example("docs/system.md", "Memory: planning, checkpointing, parallel levels")
    assert namespace["plain"].peak_bytes > 9 * namespace["planned"].peak_bytes
    assert "in place over step" in capsys.readouterr().out
    plain_value = namespace["ad"].evaluate(namespace["dx"], namespace["feed"])
    assert np.array_equal(namespace["grad"], plain_value)


def test_the_fusion_example_runs(capsys):
    namespace = run_example("docs/system.md", "Kernel fusion")
    report = namespace["report"]
    assert (report.nodes_before, report.nodes_after) == (27, 9)
    assert "2 groups of 18 ops" in capsys.readouterr().out
    ad, x = namespace["ad"], namespace["x"]
    feed = {x: np.linspace(-1, 1, 1000, dtype="float32")}
    plain = ad.Executor(namespace["outputs"]).run(feed)
    for got, want in zip([namespace["value"], namespace["dx"]], plain, strict=True):
        assert got.dtype == np.float32 and np.array_equal(got, want)
    assert namespace["tanh_grad"](2.0, 0.5).op.name == "fused"
