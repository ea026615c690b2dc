"""fluid/range_choice.py: one set of layouts for every size of a range, chosen by its worst cost ratio."""
from __future__ import annotations

import onnx
import pytest

from fluidml_xc.examples import tiny_cnn
from fluidml_xc.fluid.optimize import optimize
from fluidml_xc.fluid.range_choice import SizePoint, decide_over_range, layouts_cost
from fluidml_xc.pipeline import import_graph
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec


def _with_width(model: onnx.ModelProto, name: str = "W") -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    dim = model.graph.input[0].type.tensor_type.shape.dim[3]
    dim.Clear()
    dim.dim_param = name
    return model


@pytest.fixture(scope="module")
def points():
    model = _with_width(tiny_cnn())
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    name = model.graph.input[0].name
    return [SizePoint(label, {"W": w}, import_graph(model, {name: tuple(shape[:3]) + (w,)}))
            for label, w in (("min", 4), ("opt", 16), ("max", 64))]


def test_choice_is_the_smallest_worst_ratio(points):
    spec = machine_spec(get_board("x86_64-v3"))
    choice = decide_over_range(points, spec, "fluid")
    assert set(choice.ratios) == {"min", "opt", "max"}
    for by_size in choice.ratios.values():
        assert set(by_size) == {"min", "opt", "max"}
        assert min(by_size.values()) >= 1.0 - 1e-9
    worst = {c: max(r.values()) for c, r in choice.ratios.items()}
    assert worst[choice.chosen] == min(worst.values())
    for p in points:  # the best price at a size is at most that size's own search result
        own = layouts_cost(p.graph, optimize(p.graph, spec, "fluid").layouts, spec, "analytic", 1)
        best_there = choice.predicted_ns[p.label] / choice.ratios[choice.chosen][p.label]
        assert best_there <= own * (1 + 1e-9)
    assert choice.decisions is not None and choice.summary()["chosen"] == choice.chosen


def test_plain_mode_takes_the_preferred_size(points):
    spec = machine_spec(get_board("x86_64-v3"))
    choice = decide_over_range(points, spec, "plain")
    assert choice.chosen == "opt" and choice.decisions.layouts == {} and choice.ratios == {}


def test_plain_mode_summary_has_no_ratios(points):
    """--opt plain/greedy searches nothing: the summary (the manifest's range_choice) says so without ratios."""
    choice = decide_over_range(points, machine_spec(get_board("x86_64-v3")), "plain")
    assert choice.summary()["worst_ratio"] == 1.0 and choice.summary()["ratios"] == {}
