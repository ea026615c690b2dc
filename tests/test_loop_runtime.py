"""A Loop run at run time (frontend/loops.py, ops/control.py): a greedy decoder that stops at an end token,
against ONNX Runtime, through the JIT and through real builds (x86_64, qemu-aarch64).

The decoder: h = tanh(h @ W + E[token]); logits = h @ V; token = ArgMax(logits); score = max(logits); it stops
after the step whose token is the end token (a graph input the body reads from the outer scope), at most
MAX_STEPS steps. Scan outputs: the tokens and the scores, whose length depends on the data. A Loop bounded by
--max-dim that needs more steps fails the run (a run check: RunCheckFailed, FXC_ERR_RUN, the runner's exit 3),
also from inside another Loop's body and beside a TopK's own check; at the bound it runs."""
from __future__ import annotations

import json
import platform

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.errors import InputError, RunCheckFailed, UnresolvedShape
from fluidml_xc.frontend.ranges import ShapeRanges
from fluidml_xc.pipeline import import_graph
from fluidml_xc.run.backend import compile_model
from modelrun import cli, one_line_error, run

on_x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="in-process JIT on x86_64")

MAX_STEPS, HIDDEN, VOCAB = 20, 8, 7


def _value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def decoder(trip_input: bool = False, seed: int = 0, no_trip: bool = False) -> onnx.ModelProto:
    """The greedy decoder Loop; `trip_input`: its trip count is the graph input M instead of MAX_STEPS; `no_trip`:
    it has none (it stops only at the end token)."""
    rng = np.random.default_rng(seed)
    body = helper.make_graph([
        helper.make_node("Gather", ["E", "tok_in"], ["emb"], axis=0),
        helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
        helper.make_node("Add", ["hw", "emb"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out"]),
        helper.make_node("MatMul", ["h_out", "V"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
        helper.make_node("ReduceMax", ["logits"], ["score"], axes=[1], keepdims=0),
        helper.make_node("Equal", ["tok_out", "end"], ["is_end"]),
        helper.make_node("Not", ["is_end"], ["c_out"]),
        helper.make_node("Identity", ["tok_out"], ["tok_scan"]),
    ], "body", [_value("i", TensorProto.INT64, []), _value("c_in", TensorProto.BOOL, []),
                _value("h_in", TensorProto.FLOAT, [1, HIDDEN]), _value("tok_in", TensorProto.INT64, [1])],
        [_value("c_out", TensorProto.BOOL, [1]), _value("h_out", TensorProto.FLOAT, [1, HIDDEN]),
         _value("tok_out", TensorProto.INT64, [1]), _value("tok_scan", TensorProto.INT64, [1]),
         _value("score", TensorProto.FLOAT, [1])])
    inits = [numpy_helper.from_array((rng.standard_normal((HIDDEN, HIDDEN)) * 0.5).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((HIDDEN, VOCAB)).astype(np.float32), "V"),
             numpy_helper.from_array(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), "E"),
             numpy_helper.from_array(np.array(True), "go")]
    inputs = [_value("h0", TensorProto.FLOAT, [1, HIDDEN]), _value("start", TensorProto.INT64, [1]),
              _value("end", TensorProto.INT64, [1])]
    if trip_input:
        inputs.append(_value("M", TensorProto.INT64, []))
    elif not no_trip:
        inits.append(numpy_helper.from_array(np.array(MAX_STEPS, np.int64), "M"))
    loop = helper.make_node("Loop", ["" if no_trip else "M", "go", "h0", "start"], ["h_final", "tok_final", "tokens", "scores"],
                            name="decode", body=body)
    graph = helper.make_graph([loop], "decoder", inputs,
                              [_value("h_final", TensorProto.FLOAT, [1, HIDDEN]), _value("tokens", TensorProto.INT64, None),
                               _value("scores", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def feeds_for(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"h0": rng.standard_normal((1, HIDDEN)).astype(np.float32), "start": np.array([seed % VOCAB], np.int64),
            "end": np.array([-1], np.int64)}


def stopping_feeds(model: onnx.ModelProto) -> list[tuple[dict, int]]:
    """Feeds that stop at step 1, at a middle step and never (MAX_STEPS), each with its number of steps: the end
    token is chosen from the tokens ORT decodes without one."""
    for seed in range(50):
        feeds = feeds_for(seed)
        tokens = list(_ort(model, feeds)[1].ravel())
        middle = next((t for t in tokens[3:MAX_STEPS - 3] if t not in tokens[:tokens.index(t)] and t != tokens[0]), None)
        if middle is not None:
            at = tokens.index(middle) + 1
            return [({**feeds, "end": np.array([tokens[0]], np.int64)}, 1),
                    ({**feeds, "end": np.array([middle], np.int64)}, at), (feeds, MAX_STEPS)]
    raise AssertionError("no seed decodes a token first seen in the middle")


def check(got: list[np.ndarray], want: list[np.ndarray], steps: int) -> None:
    assert got[1].shape == (steps, 1) and got[2].shape == (steps, 1), (got[1].shape, steps)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@on_x86
def test_decoder_stops_at_the_end_token_jit():
    model = decoder()
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == ["Loop"]  # one node, not MAX_STEPS copies of the body
    compiled = compile_model(model)
    cases = stopping_feeds(model)
    assert [steps for _, steps in cases][::2] == [1, MAX_STEPS] and 1 < cases[1][1] < MAX_STEPS
    for feeds, steps in cases:
        check(compiled(feeds), _ort(model, feeds), steps)


@on_x86
def test_run_time_trip_count_with_max_dim_jit():
    model = decoder(trip_input=True)
    compiled = compile_model(model, max_dims={"decode": MAX_STEPS})
    feeds = feeds_for(3)
    for m in (0, 1, 7, MAX_STEPS):
        feeds["M"] = np.array(m, np.int64)
        check(compiled(feeds), _ort(model, feeds), m)
    stop = {**feeds, "end": np.array([_ort(model, {**feeds, "M": np.array(5, np.int64)})[1][2, 0]], np.int64)}
    check(compiled(stop), _ort(model, stop), int(_ort(model, stop)[1].shape[0]))


BOUND_MESSAGE = "Loop node 'decode' needs more than its bound of {n} steps (--max-dim decode={n}); the outputs are not valid: rebuild with a larger --max-dim decode=N"


@on_x86
def test_loop_past_its_max_dim_is_an_error_jit():
    """A Loop bounded by --max-dim that would run past it raises RunCheckFailed (it used to stop there silently); one
    that stops exactly at the bound (its trip count, or its end token at the last step) runs."""
    model = decoder(trip_input=True)
    compiled = compile_model(model, max_dims={"decode": 6})
    feeds = feeds_for(3)
    for m in (0, 6):
        feeds["M"] = np.array(m, np.int64)
        check(compiled(feeds), _ort(model, feeds), m)
    for m in (7, 1 << 40):
        with pytest.raises(RunCheckFailed) as err:
            compiled({**feeds, "M": np.array(m, np.int64)})
        assert str(err.value) == BOUND_MESSAGE.format(n=6)
    model = decoder(no_trip=True)
    (first, _), (middle, at), (never, _) = stopping_feeds(decoder())
    compiled = compile_model(model, max_dims={"tokens": at})
    for feeds, steps in ((first, 1), (middle, at)):
        check(compiled(feeds), _ort(model, feeds), steps)
    with pytest.raises(RunCheckFailed, match=f"bound of {at} steps .*--max-dim tokens=N"):
        compiled(never)


@on_x86
def test_loop_and_topk_share_one_status_word():
    """A bounded Loop and a TopK with a run-time K in one graph: one status word, each failed check named by its
    own line; both within their bounds, the outputs are ORT's."""
    model = decoder(trip_input=True)
    model.graph.node.append(helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=-1))
    model.graph.input.extend([_value("x", TensorProto.FLOAT, [1, 10]), _value("k", TensorProto.INT64, [1])])
    model.graph.output.extend([_value("v", TensorProto.FLOAT, None), _value("i", TensorProto.INT64, None)])
    compiled = compile_model(model, max_dims={"decode": 6})
    feeds = {**feeds_for(3), "M": np.array(6, np.int64), "x": np.arange(10, dtype=np.float32)[None] % 7,
             "k": np.array([4], np.int64)}
    got, want = compiled(feeds), _ort(model, feeds)
    check(got[:3], want[:3], 6)
    for g, w in zip(got[3:], want[3:]):
        np.testing.assert_array_equal(g, w)
    with pytest.raises(RunCheckFailed) as err:
        compiled({**feeds, "M": np.array(7, np.int64)})
    assert str(err.value) == BOUND_MESSAGE.format(n=6)
    with pytest.raises(RunCheckFailed, match="^TopK node 'topk': K read in this run is negative"):
        compiled({**feeds, "k": np.array([11], np.int64)})


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64", "qemu-armv7"])
def test_loop_past_its_max_dim_fails_the_run(board, board_runner, tmp_path):
    """A real build: the C API returns FXC_ERR_RUN, the runner exits 3 with one line and writes no output, `run`
    and `verify` exit 2 with one line naming the Loop, its bound and the fix; at the bound the run is ORT's."""
    from fluidml_xc.run.execute import save_npz

    runner = board_runner(board)
    model = decoder(trip_input=True)
    artifact = runner.build(model, tmp_path, ranges=ShapeRanges(max_dims={"decode": 6}), profile_runner=False)
    feeds = {**feeds_for(3), "M": np.array(6, np.int64)}
    got = run(artifact, feeds)
    check([got["h_final"], got["tokens"], got["scores"]], _ort(model, feeds), 6)
    args = []
    for name, value in {**feeds, "M": np.array(7, np.int64)}.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["-i", str(tmp_path / f"{name}.npy")]
    outs = [tmp_path / f"out{i}.npy" for i in range(3)]
    proc = runner.exec([artifact / "runner", *args, *[a for o in outs for a in ("-o", str(o))]], timeout=300)
    assert proc.returncode == 3 and proc.stderr == f"runner: error: {BOUND_MESSAGE.format(n=6)}\n", proc.stderr
    assert not any(o.exists() for o in outs)
    save_npz(tmp_path / "m7.npz", {**feeds, "M": np.array(7, np.int64)})
    for command in (["run", str(artifact), "--inputs", str(tmp_path / "m7.npz"), "--outputs", str(tmp_path / "o.npz")],
                    ["verify", str(artifact), "--inputs", str(tmp_path / "m7.npz")]):
        proc = cli(*command)
        assert proc.returncode == 2 and one_line_error(proc) == f"fluidml-xc: error: {BOUND_MESSAGE.format(n=6)}"
    assert not (tmp_path / "o.npz").exists()


def test_run_time_trip_count_without_max_dim_is_one_line():
    with pytest.raises(UnresolvedShape) as err:
        import_graph(decoder(trip_input=True))
    message = str(err.value)
    assert "\n" not in message and "--max-dim decode=N" in message and "--max-dim tokens=N" in message


def test_build_asks_for_max_dim(tmp_path):
    path = tmp_path / "decoder.onnx"
    onnx.save(decoder(trip_input=True), str(path))
    proc = cli("build", str(path), "--board", "x86_64", "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "--max-dim decode=N" in one_line_error(proc)
    assert not (tmp_path / "out").exists()


def test_carried_value_changing_shape_is_refused():
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Concat", ["x_in", "x_in"], ["x_out"], axis=0)], "body",
                             [_value("i", TensorProto.INT64, []), _value("c_in", TensorProto.BOOL, []),
                              _value("x_in", TensorProto.FLOAT, [2])],
                             [_value("c_out", TensorProto.BOOL, []), _value("x_out", TensorProto.FLOAT, None)])
    graph = helper.make_graph([helper.make_node("Loop", ["M", "", "x"], ["y"], name="grow", body=body)], "g",
                              [_value("x", TensorProto.FLOAT, [2]), _value("M", TensorProto.INT64, [])],
                              [_value("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InputError, match="carried value 'x'") as err:
        import_graph(model, ranges=ShapeRanges(max_dims={"grow": 4}))
    assert "\n" not in str(err.value)


@on_x86
def test_long_constant_loop_runs_without_unrolling():
    """2,000 steps (too many to unroll), condition kept true: exact trip count, so its scan output is static and
    feeds another op."""
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Mul", ["x_in", "k"], ["x_mul"]),
                              helper.make_node("Sin", ["x_mul"], ["x_out"]),
                              helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0)], "body",
                             [_value("i", TensorProto.INT64, []), _value("c_in", TensorProto.BOOL, []),
                              _value("x_in", TensorProto.FLOAT, [5])],
                             [_value("c_out", TensorProto.BOOL, []), _value("x_out", TensorProto.FLOAT, [5]),
                              _value("s", TensorProto.FLOAT, [])])
    graph = helper.make_graph([helper.make_node("Loop", ["M", "", "x"], ["y", "sums"], body=body),
                               helper.make_node("ReduceSum", ["sums"], ["total"], keepdims=0)], "g",
                              [_value("x", TensorProto.FLOAT, [5]), _value("k", TensorProto.FLOAT, [5])],
                              [_value("y", TensorProto.FLOAT, [5]), _value("total", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(np.array(2000, np.int64), "M")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert sum(n.op_type == "Loop" for n in import_graph(model).nodes) == 1
    feeds = {"x": np.linspace(-1, 1, 5).astype(np.float32), "k": np.full(5, 1.3, np.float32)}
    for g, w in zip(compile_model(model)(feeds), _ort(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64"])
def test_decoder_build_and_run(board, board_runner, tmp_path):
    """A real build (runner, C API reporting the actual lengths), run here or under qemu."""
    runner = board_runner(board)
    model = decoder(trip_input=board == "x86_64")
    ranges = ShapeRanges(max_dims={"tokens": MAX_STEPS}) if board == "x86_64" else ShapeRanges()
    artifact = runner.build(model, tmp_path, ranges=ranges, profile_runner=False)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["weights_bytes"] == sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer)  # the body's
    cases = stopping_feeds(decoder())
    for feeds, steps in cases:
        if board == "x86_64":
            feeds = {**feeds, "M": np.array(MAX_STEPS, np.int64)}
        got = run(artifact, feeds)
        check([got["h_final"], got["tokens"], got["scores"]], _ort(model, feeds), steps)
    if board == "x86_64":
        feeds = {**cases[2][0], "M": np.array(6, np.int64)}
        got = run(artifact, feeds)
        check([got["h_final"], got["tokens"], got["scores"]], _ort(model, feeds), 6)


def nested_loops(inner_trips: str = "fifty", outer_runs: bool = False) -> onnx.ModelProto:
    """A Loop in a Loop's body: x = 0.9 x + 0.1 while sum(x) > lim (at most 50 steps, or with `inner_trips` ""
    no trip count; its scan output unused), six times, doubling x after each inner loop. `outer_runs`: the outer
    condition is computed (i < 6), so the outer Loop runs at run time instead of being unrolled."""
    inner = helper.make_graph([
        helper.make_node("Mul", ["x_in", "k"], ["xm"]), helper.make_node("Add", ["xm", "b"], ["x_out"]),
        helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "lim"], ["c_out"]),
        helper.make_node("Identity", ["s"], ["s_scan"])], "inner",
        [_value("j", TensorProto.INT64, []), _value("ci", TensorProto.BOOL, []), _value("x_in", TensorProto.FLOAT, [4])],
        [_value("c_out", TensorProto.BOOL, []), _value("x_out", TensorProto.FLOAT, [4]), _value("s_scan", TensorProto.FLOAT, [])])
    outer = helper.make_graph([
        helper.make_node("Loop", [inner_trips, "", "y_in"], ["y_mid", "sums"], name="inner", body=inner),
        helper.make_node("Mul", ["y_mid", "two"], ["y_out"]),
        helper.make_node("Less", ["i", "six"], ["c_out"]) if outer_runs else helper.make_node("Identity", ["co"], ["c_out"]),
        helper.make_node("ReduceSum", ["y_out"], ["tot"], keepdims=0)], "outer",
        [_value("i", TensorProto.INT64, []), _value("co", TensorProto.BOOL, []), _value("y_in", TensorProto.FLOAT, [4])],
        [_value("c_out", TensorProto.BOOL, []), _value("y_out", TensorProto.FLOAT, [4]), _value("tot", TensorProto.FLOAT, [])])
    consts = {"six": np.array(6, np.int64), "fifty": np.array(50, np.int64), "k": np.full(4, 0.9, np.float32),
              "b": np.full(4, 0.1, np.float32), "two": np.array(2.0, np.float32)}
    graph = helper.make_graph([helper.make_node("Loop", ["six", "", "x"], ["y", "tots"], name="outer", body=outer)], "g",
                              [_value("x", TensorProto.FLOAT, [4]), _value("lim", TensorProto.FLOAT, [])],
                              [_value("y", TensorProto.FLOAT, [4]), _value("tots", TensorProto.FLOAT, [6])],
                              [numpy_helper.from_array(v, n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@on_x86
def test_nested_loops():
    model = nested_loops()
    compiled = compile_model(model)
    for lim in (0.5, 3.0, 100.0):
        feeds = {"x": np.array([1, 2, 3, 4], np.float32), "lim": np.array(lim, np.float32)}
        for g, w in zip(compiled(feeds), _ort(model, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-5)


@on_x86
def test_nested_loop_past_its_max_dim_is_an_error():
    """The inner Loop, with no trip count, bounded by --max-dim inner=N: a run whose inner loop needs more than N
    steps raises RunCheckFailed naming it (its status passed up through the outer Loop); one that needs N runs."""
    model = nested_loops(inner_trips="", outer_runs=True)
    assert [n.op_type for n in import_graph(model, ranges=ShapeRanges(max_dims={"inner": 9})).nodes] == ["Loop"]
    x = np.array([1, 2, 3, 4], np.float32)
    steps = []
    for lim in (6.0, 5.0):  # the inner loop's most steps over the six outer ones (sum(x) tends to 4)
        y, most = x, 0
        for _ in range(6):
            n = 0
            while n < 100:
                y, n = y * np.float32(0.9) + np.float32(0.1), n + 1
                if not y.sum() > lim:
                    break
            y, most = y * 2, max(most, n)
        steps.append(most)
    assert steps[0] < steps[1] < 100
    compiled = compile_model(model, max_dims={"inner": steps[0]})
    feeds = {"x": x, "lim": np.array(6.0, np.float32)}
    for g, w in zip(compiled(feeds), _ort(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5)
    with pytest.raises(RunCheckFailed, match=rf"Loop node '.*inner' needs more than its bound of {steps[0]} steps"):
        compiled({**feeds, "lim": np.array(5.0, np.float32)})


@on_x86
def test_range_with_a_data_dependent_limit():
    """A Range whose limit is computed from the data (ArgMax), lowered natively (its ONNX function is a Loop): with
    --max-dim on its output it builds, and the output's length is reported per run (tests/test_runtime_sizes.py)."""
    nodes = [helper.make_node("ArgMax", ["x"], ["k"], keepdims=0, axis=0), helper.make_node("Add", ["k", "one"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"], name="ramp")]
    graph = helper.make_graph(nodes, "g", [_value("x", TensorProto.FLOAT, [6])], [_value("r", TensorProto.INT64, None)],
                              [numpy_helper.from_array(np.array(1, np.int64), "one"),
                               numpy_helper.from_array(np.array(0, np.int64), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = compile_model(model, max_dims={"r": 6})
    for i in (0, 3, 5):
        x = np.zeros(6, np.float32)
        x[i] = 1
        np.testing.assert_array_equal(compiled({"x": x})[0], _ort(model, {"x": x})[0])


def test_static_loop_in_a_dynamic_model_imports_once():
    """A model imported over a range (--dim W=4..32) holding a run-time Loop that does not vary: the imports at
    the range's sizes see one body (frontend/loops.py BodyGraph), so the Loop is kept, not refused as size-dependent."""
    from fluidml_xc.frontend.ranges import parse_ranges
    from fluidml_xc.ir import BODY_ATTR
    from fluidml_xc.pipeline import import_unchecked

    model = decoder()
    model.graph.input.append(_value("z", TensorProto.FLOAT, [1, "W"]))
    model.graph.node.append(helper.make_node("Relu", ["z"], ["zr"]))
    model.graph.output.append(_value("zr", TensorProto.FLOAT, [1, "W"]))
    graph = import_unchecked(model, ranges=parse_ranges({}, ["W=4..32"], [], []))
    assert list(graph.symbols) == ["W"] and [n.op_type for n in graph.nodes] == ["Loop", "Relu"]
    loop = graph.nodes[0]
    assert loop.attrs[BODY_ATTR] == import_graph(decoder()).nodes[0].attrs[BODY_ATTR]
    assert graph.tensors["tokens"].dyn is None and graph.tensors["tokens"].shape == (MAX_STEPS, 1)
