"""The FluidML optimizer: DP vs brute force, voting, segmentation, cost cache, MatMul under every layout,
example models under all three --opt modes, and `inspect`."""
from __future__ import annotations

import itertools
import json
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.fluid.cost_cache import CostCache, entry_key, kernel_signature, layouts_key
from fluidml_xc.fluid.costs import Costs
from fluidml_xc.fluid.layouts import LayoutProblem, brute_force_segment, candidate_layouts, solve_segment
from fluidml_xc.fluid.segmentation import Segment, segment_graph
from fluidml_xc.fluid.voting import vote_layouts
from modelrun import jit_node


# -- abstract problems -----------------------------------------------------------------------------
def _random_problem(rng: random.Random, n_nodes: int, dag: bool):
    """Nodes 0..n-1; node i produces tensor t{i}; reads the previous one (chain) or 1-2 earlier ones (DAG)."""
    edges, node_tensors = [], []
    cands = {}
    for i in range(n_nodes):
        t = f"t{i}"
        cands[t] = [(0, 1, 2), (0, 2, 1), (1, 0, 2)][: rng.randint(1, 3)]
        reads = []
        if i > 0:
            reads = [i - 1] if not dag else sorted(set(rng.sample(range(i), min(i, rng.randint(1, 2)))))
        for p in reads:
            edges.append((p, i, f"t{p}"))
        node_tensors.append([f"t{p}" for p in reads] + [t])
    table = {}

    def cost(i, layouts):
        key = (i, tuple(layouts.get(t) for t in node_tensors[i]))
        if key not in table:
            table[key] = rng.uniform(0, 10)
        return table[key]
    return LayoutProblem(node_tensors, cands, cost), edges


@pytest.mark.parametrize("seed", range(40))
def test_dp_equals_brute_force_on_chains(seed):
    rng = random.Random(seed)
    problem, edges = _random_problem(rng, rng.randint(1, 6), dag=False)
    n = len(problem.node_tensors)
    seg = Segment(list(range(n)), [f"t{i}" for i in range(n - 1)])
    sol = solve_segment(problem, seg)
    best = min(problem.total(dict(zip(problem.candidates, combo)))
               for combo in itertools.product(*problem.candidates.values()))
    assert sol.cost == pytest.approx(best)
    assert sol.cost == pytest.approx(brute_force_segment(problem, seg))
    # the whole chain is one segment: voting changes nothing and the total is optimal
    result = vote_layouts(problem, segment_graph(n, edges, [1.0] * n))
    assert result.cost == pytest.approx(best)


@pytest.mark.parametrize("seed", range(40))
def test_dp_equals_brute_force_on_dag_segments(seed):
    rng = random.Random(1000 + seed)
    problem, edges = _random_problem(rng, rng.randint(2, 7), dag=True)
    n = len(problem.node_tensors)
    segments = segment_graph(n, edges, [rng.uniform(1, 5) for _ in range(n)])
    assert sorted(v for s in segments for v in s.nodes) == list(range(n))
    pins = {}
    for s in segments:
        assert solve_segment(problem, s).cost == pytest.approx(brute_force_segment(problem, s))
        t = next(iter(problem.candidates))
        pins = {t: problem.candidates[t][-1]}
        assert solve_segment(problem, s, pins).cost == pytest.approx(brute_force_segment(problem, s, pins))
    result = vote_layouts(problem, segments)
    # consistent: every tensor has one layout and the reported total is its true cost
    assert set(result.layouts) == set(problem.candidates)
    assert result.cost == pytest.approx(problem.total(result.layouts))
    best = min(problem.total(dict(zip(problem.candidates, combo)))
               for combo in itertools.product(*problem.candidates.values()))
    assert result.cost >= best - 1e-9


def test_voting_weighs_cost_differences():
    # t0 is produced by node 0 and read by node 1 (segment A) and node 2 (segment B).
    L0, L1 = (0, 1), (1, 0)
    costs = {0: {L0: 0, L1: 0}, 1: {L0: 0, L1: 1}, 2: {L0: 100, L1: 0}}
    problem = LayoutProblem([["t0"], ["t0"], ["t0"]], {"t0": [L0, L1]}, lambda i, lay: costs[i][lay["t0"]])
    segs = [Segment([0, 1], ["t0"]), Segment([2], [])]
    result = vote_layouts(problem, segs)
    assert result.layouts["t0"] == L1  # one vote costing 1 loses to one costing 100
    assert result.votes and result.votes[0].penalties[L1] == 1 and result.votes[0].penalties[L0] == 100
    assert result.cost == 1
    # losing segment was re-solved with the shared tensor pinned
    assert result.solutions[0].chain["t0"] == L1


def test_segmentation_longest_weighted_path():
    # diamond 0 -> {1, 2} -> 3, node 2 heavy: main sequence 0-2-3, then [1]
    edges = [(0, 1, "a"), (0, 2, "a"), (1, 3, "b"), (2, 3, "c")]
    segs = segment_graph(4, edges, [1, 1, 10, 1])
    assert segs[0].nodes == [0, 2, 3] and segs[0].chain == ["a", "c"] and segs[0].cost == 12
    assert [s.nodes for s in segs[1:]] == [[1]]
    # two disconnected chains after removing the main path become two segments
    edges = [(0, 1, "x"), (1, 2, "y"), (0, 3, "x"), (3, 4, "z"), (1, 5, "y")]
    segs = segment_graph(6, edges, [1, 5, 1, 1, 1, 1])
    assert sorted(v for s in segs for v in s.nodes) == list(range(6))
    assert all(len(s.chain) == len(s.nodes) - 1 for s in segs)


def test_candidates_keep_size_one_dims_and_cap():
    c = candidate_layouts((1, 8, 1, 4))
    assert c[0] == (0, 1, 2, 3) and (0, 3, 2, 1) in c and all(p[0] == 0 and p[2] == 2 for p in c)
    assert len(candidate_layouts((2, 3, 4, 5))) <= 6
    assert candidate_layouts((1, 7)) == [(0, 1)]


# -- costs -------------------------------------------------------------------------------------
def _matmul_model(a_shape, b_shape, b_const=False, perm=None):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(b_shape).astype(np.float32), "B")] if b_const else []
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, list(a_shape))]
    if not b_const:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, list(b_shape)))
    out_shape = list(np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape)
    nodes = [helper.make_node("MatMul", ["A", "B"], ["C"], name="mm")]
    g = helper.make_graph(nodes, "mm", inputs, [helper.make_tensor_value_info("C", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _graph(model):
    from fluidml_xc.frontend.importer import FrontendOptions, import_model
    from fluidml_xc.passes import run_passes
    g = import_model(model, FrontendOptions(), name="t")
    run_passes(g)
    return g


def _spec():
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec
    return machine_spec(get_board(None))


def test_cost_cache_round_trip_with_board_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path))
    g = _graph(_matmul_model((8, 16), (16, 4)))
    node = g.nodes[0]
    sig = kernel_signature(g, node)
    key = layouts_key(g, node, {"A": (1, 0)}, "ijk")
    cache = CostCache("x86_64-test--cpu")
    assert cache.get(sig, key) is None
    cache.put(sig, key, 0.125, 7, "host:test")
    cache.save()
    again = CostCache("x86_64-test--cpu")
    assert again.get(sig, key) == 0.125 and again.path.parent == tmp_path / "costs"
    # a board's measurement (same format, entries as a list) replaces the host's and is not overwritten by it
    board = {"format": 1, "board": "rpi4", "entries": [{"signature": sig, "layouts": key, "ms": 0.5, "runs": 20}]}
    assert again.merge(board) == 1
    again.put(sig, key, 0.01, 7, "host:test")
    assert again.get(sig, key) == 0.5
    again.save()
    data = json.loads(again.path.read_text())
    entry = data["entries"][entry_key(sig, key)]
    assert entry["source"] == "board:rpi4" and data["format"] == 1


def test_measure_costs_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path))
    g = _graph(_matmul_model((1, 16, 32), (1, 32, 8)))
    from fluidml_xc.emit.measure import Measurer
    from fluidml_xc.target.host import host_can_run

    spec = _spec()
    if not host_can_run(spec.triple, spec.cpu):
        pytest.skip("host cpu differs from the target")
    attrs = dict(g.nodes[0].attrs)
    costs = Costs(g, spec, "measure", timer=Measurer(g, spec))
    ns, order = costs.cost_and_order(g.nodes[0], {"A": (0, 2, 1)})
    assert ns > 0 and order and costs.measurer.measured >= 1 and g.nodes[0].attrs == attrs
    costs.save()
    again = Costs(g, spec, "measure", timer=Measurer(g, spec))
    again.cost_and_order(g.nodes[0], {"A": (0, 2, 1)})
    assert again.measurer.measured == 0 and again.cache.hits >= 1
    cache_only = Costs(g, spec, "measure")
    assert cache_only.measurer is None and cache_only.cost_and_order(g.nodes[0], {"A": (0, 2, 1)}) == again.cost_and_order(
        g.nodes[0], {"A": (0, 2, 1)})


# -- MatMul/Gemm kernels under every layout and loop order -----------------------------------------
@pytest.mark.parametrize("order", ["ikj", "ijk", "jki", "kij"])
@pytest.mark.parametrize("case", ["act", "const", "batched", "gemm"])
def test_matmul_every_layout_and_order(case, order):
    if case == "gemm":
        rng = np.random.default_rng(3)
        inits = [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "B"),
                 numpy_helper.from_array(rng.standard_normal((6,)).astype(np.float32), "bias")]
        nodes = [helper.make_node("Gemm", ["A", "B", "bias"], ["C"], transB=1, alpha=0.5, beta=2.0, name="mm")]
        gr = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [7, 5])],
                               [helper.make_tensor_value_info("C", TensorProto.FLOAT, [7, 6])], inits)
        g = _graph(helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)]))
    else:
        shapes = {"act": ((7, 5), (5, 6), False), "const": ((7, 5), (5, 6), True), "batched": ((2, 7, 5), (2, 5, 6), False)}[case]
        g = _graph(_matmul_model(*shapes))
    node = g.nodes[0]
    acts = [n for n in list(node.inputs) + list(node.outputs) if n and not g.tensors[n].is_const]
    options = [candidate_layouts(g.tensors[n].shape) for n in acts]
    for combo in itertools.product(*options):
        layouts = {n: p for n, p in zip(acts, combo)}
        logical, got = jit_node(g, node, layouts, order, seed=1)
        if node.op_type == "Gemm":
            want = 0.5 * logical["A"] @ g.tensors["B"].value.T + 2.0 * g.tensors["bias"].value
        else:
            want = np.matmul(logical["A"], logical["B"])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{layouts} {order}")


# -- models ------------------------------------------------------------------------------------
def _examples():
    from fluidml_xc.examples import EXAMPLES
    return sorted(EXAMPLES)


@pytest.mark.parametrize("example", _examples())
def test_examples_same_outputs_under_every_opt(example, tmp_path):
    from fluidml_xc.examples import EXAMPLES, example_feeds
    from fluidml_xc.reference import reference_outputs
    from modelrun import build, run

    model = EXAMPLES[example]()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    feeds = example_feeds(model)
    ref = reference_outputs(path, feeds)
    outs = {}
    for opt in ("plain", "greedy", "fluid"):
        artifact = build(path, tmp_path, "x86_64", opt=opt, profile_runner=False)
        manifest = json.loads((artifact / "manifest.json").read_text())
        mem = manifest["memory"]
        assert mem["arena_bytes"] >= mem["live_peak_bytes"] >= 0 and mem["naive_bytes"] >= mem["arena_bytes"]
        if opt != "plain":  # fragmentation within 5% of the chosen order's live peak
            assert mem["arena_bytes"] <= 1.05 * mem["live_peak_bytes"] + mem["alignment"]
        outs[opt] = run(artifact, feeds)
        for name, want in ref.items():
            np.testing.assert_allclose(outs[opt][name], want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.max(np.abs(want)))))
    for name in ref:
        np.testing.assert_allclose(outs["fluid"][name], outs["greedy"][name], rtol=1e-4, atol=1e-6)


def test_inspect_prints_sections(tmp_path, capsys):
    from fluidml_xc.cli import main
    from fluidml_xc.examples import EXAMPLES
    from modelrun import build

    model = EXAMPLES["tiny_mlp"]()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    artifact = build(path, tmp_path, "x86_64", opt="fluid", profile_runner=False)
    assert main(["inspect", str(artifact)]) == 0
    text = capsys.readouterr().out
    for section in ("segments", "layouts", "loop orders", "memory plan", "lower bound", "naive", "winner", "memory map"):
        assert section in text.lower(), section


@pytest.mark.parametrize("shapes", [((37, 29), (29, 45), True), ((2, 13, 70), (70, 19), False), ((3, 1, 9, 33), (2, 33, 17), False),
                                    ((1, 100), (100, 70), True), ((5, 64), (64,), False)])
def test_blocked_matmul_tiles_edges_and_batches(shapes):
    """Full tiles, edge rows/columns, K tails, batch broadcasting, under row-major and transposed layouts."""
    g = _graph(_matmul_model(*shapes))
    node = g.nodes[0]
    acts = [n for n in list(node.inputs) + list(node.outputs) if n and not g.tensors[n].is_const]
    for order in ("ikj", "ijk", "jki"):
        for combo in itertools.product(*[candidate_layouts(g.tensors[n].shape)[:2] for n in acts]):
            layouts = dict(zip(acts, combo))
            logical, got = jit_node(g, node, layouts, order, seed=1)
            np.testing.assert_allclose(got, np.matmul(logical["A"], logical["B"]), rtol=1e-4, atol=1e-4, err_msg=f"{layouts} {order}")


def test_fluid_keeps_transposed_k_in_place():
    """Attention's K^T takes K's storage order: the Transpose becomes a view, the MatMul reads B K-contiguous."""
    from fluidml_xc.examples import EXAMPLES
    from fluidml_xc.fluid.optimize import apply_views, optimize
    g = _graph(EXAMPLES["tiny_transformer"]())
    d = optimize(g, _spec(), "fluid")
    assert d.layouts.get("kt") == (0, 2, 1) and d.views == ["k_t"]
    assert next(n for n in g.nodes if n.name == "k_t").op_type == "Transpose"
    assert next(n for n in apply_views(g, d.layouts).nodes if n.name == "k_t").op_type == "Identity"
    assert d.predicted_ns < d.row_major_ns
    greedy = _graph(EXAMPLES["tiny_transformer"]())
    assert not optimize(greedy, _spec(), "greedy").views and any(n.op_type == "Transpose" for n in greedy.nodes)


def test_measured_kernels_run_onpage_aligned_buffers():
    from fluidml_xc.emit.measure import page_aligned
    for value in (np.arange(7, dtype=np.float32), np.ones((3, 5), np.int64), np.zeros(100_000, np.float32)):
        aligned = page_aligned(value)
        assert aligned.ctypes.data % 4096 == 0
        assert aligned.dtype == value.dtype and aligned.shape == value.shape
        np.testing.assert_array_equal(aligned, value)
