"""Issue 26: running a dynamic build. One graph over a symbol W (tests/dynamic_harness.py's DynamicCase, no frontend)
is built into real artifacts (x86_64 here, aarch64 under qemu) and the JIT, and run at the minimum, the maximum and
sizes between against onnx.reference: an input whose dense layout is not its capacity layout's prefix (staged in
the arena), one that is (read in place), outputs compacted to dense, an output that is a graph input, an output
listed twice. Feeds outside the range, a fixed dim given another size and one symbol given two sizes are refused
(InputError / runner exit 2 / FXC_ERR_SHAPE), also by a runner built with AddressSanitizer + UBSan."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from dynamic_harness import DynamicCase
from fluidml_xc.errors import InputError
from fluidml_xc.symbolic import Sym, SymRange

LO, HI = 1, 33
SIZES = (LO, 2, 7, 16, HI)
W = Sym("W")


def _case() -> DynamicCase:
    """x [2, W, 3] (not a prefix: staged), p [W, 5] (a prefix); outputs y = Relu(Relu(x)) [2, W, 3] (compacted),
    z = Relu(p) [W, 5], x itself, and y again."""
    case = DynamicCase({"W": SymRange("W", LO, HI, 8)})
    x = case.input("x", np.float32, (2, W, 3))
    p = case.input("p", np.float32, (W, 5))
    (a,) = case.node("Relu", [x], [(np.float32, (2, W, 3))], output=False)
    (y,) = case.node("Relu", [a], [(np.float32, (2, W, 3))])
    case.node("Relu", [p], [(np.float32, (W, 5))])
    case.graph.outputs += [x, y]
    return case


def _onnx_model(case: DynamicCase) -> onnx.ModelProto:
    """The same graph as ONNX with W a dim_param (what ONNX Runtime and onnx.reference run at any size)."""
    g = case.graph

    def info(name: str):
        t = g.tensors[name]
        dims = [str(d) if not isinstance(d, int) else d for d in (t.dyn or t.shape)]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), dims)

    outputs = list(dict.fromkeys(g.outputs))
    graph = helper.make_graph(case.onnx_nodes, "dyn", [info(n) for n in g.inputs], [info(n) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])


def _feeds(w: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + w)
    return {"x": rng.standard_normal((2, w, 3)).astype(np.float32), "p": rng.standard_normal((w, 5)).astype(np.float32)}


def _expected(model: onnx.ModelProto, names: list[str], feeds: dict) -> list[np.ndarray]:
    got = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    return [got[n] for n in names]


def _check(outputs: list[np.ndarray], names: list[str], model, feeds: dict) -> None:
    for name, got, want in zip(names, outputs, _expected(model, names, feeds)):
        assert got.shape == want.shape, f"{name}: shape {got.shape}, want {want.shape}"
        np.testing.assert_array_equal(got, want, err_msg=name)


REFUSALS = [  # (feeds, the message's distinctive part)
    ({"x": np.zeros((2, HI + 1, 3), np.float32), "p": np.zeros((HI + 1, 5), np.float32)}, f"is {HI + 1}, outside W={LO}..{HI}"),
    ({"x": np.zeros((2, 0, 3), np.float32), "p": np.zeros((0, 5), np.float32)}, f"is 0, outside W={LO}..{HI}"),
    ({"x": np.zeros((3, 4, 3), np.float32), "p": np.zeros((4, 5), np.float32)}, "dim 0 is 3, but the model fixes it at 2"),
    ({"x": np.zeros((2, 4, 3), np.float32), "p": np.zeros((5, 5), np.float32)}, "input 'p' dim 0 is 5, but input 'x' set W=4"),
]


@pytest.fixture(scope="module")
def host_artifact(tmp_path_factory):
    from fluidml_xc.build import BuildOptions, build_graph

    case = _case()
    work = tmp_path_factory.mktemp("dynrun")
    model = _onnx_model(case)
    onnx.save(model, str(work / "dyn.onnx"))
    result = build_graph(case.graph, BuildOptions(out_dir=work / "art", opt="plain", record_last=False),
                         model_path=work / "dyn.onnx")
    return result, model


def test_jit_runs_every_size_and_refuses_bad_feeds():
    from fluidml_xc.pipeline import LowerOptions, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    case = _case()
    jit = JitModel(lower(case.graph, machine_spec(get_board(None)), LowerOptions(opt="plain")))
    model = _onnx_model(case)
    for w in SIZES:
        _check(jit(_feeds(w)), case.graph.outputs, model, _feeds(w))
    for feeds, message in REFUSALS:
        with pytest.raises(InputError, match=message):
            jit(feeds)


def _causal_mask_model() -> onnx.ModelProto:
    """x [1, seq, 4]; mask [seq, seq] = Cast(Range(seq)[None] < Range(seq)[:, None]) folded from Shape (a constant
    stored with capacity strides) is a graph output, and y = x @ x^T + mask reads it."""
    from onnx import TensorProto, numpy_helper

    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("one", 1), ("zero", 0), ("step", 1), ("a0", [0]), ("a1", [1]))]
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Gather", ["sh", "one"], ["n"], axis=0),
             helper.make_node("Range", ["zero", "n", "step"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "a0"], ["r0"]), helper.make_node("Unsqueeze", ["r", "a1"], ["r1"]),
             helper.make_node("Less", ["r0", "r1"], ["lower"]),
             helper.make_node("Cast", ["lower"], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), helper.make_node("MatMul", ["x", "xt"], ["s"]),
             helper.make_node("Add", ["s", "mask"], ["y"])]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 4])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("mask", "y")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_varying_constant_output_is_copied_dense():
    """The mask is stored with capacity strides [8, 8]: at seq=3 its first 9 floats were returned
    ([[0,0,0],[0,0,0],[0,0,1]]), now its rows are, at every size of seq=2..8."""
    from fluidml_xc.frontend.ranges import parse_ranges
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    model = _causal_mask_model()
    graph = import_graph(model, ranges=parse_ranges({}, ["seq=2..8"], [], []))
    assert graph.tensors["mask"].is_const and graph.tensors["mask"].shape == (8, 8)
    jit = JitModel(lower(graph, machine_spec(get_board(None)), LowerOptions(opt="plain")))
    for seq in range(2, 9):
        feeds = {"x": np.random.default_rng(seq).standard_normal((1, seq, 4)).astype(np.float32)}
        mask, y = jit(feeds)
        want_mask, want_y = ReferenceEvaluator(model).run(None, feeds)
        np.testing.assert_array_equal(mask, want_mask, err_msg=f"seq={seq}")
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5, err_msg=f"seq={seq}")


def test_build_table_says_what_the_arena_tail_holds(tmp_path):
    """x [2, W, 3] is staged after the plan (its dense layout is no prefix of the capacity's): the build's summary
    names it, with the dims slots, instead of calling the tail "dims/scratch of data-dependent outputs"."""
    from modelrun import cli

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, "W", 3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, "W", 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    proc = cli("build", "m.onnx", "--dim", "W=1..33", "-o", "out", "--no-profile-runner", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    memory = json.loads((tmp_path / "out" / "manifest.json").read_text())["memory"]
    tail = memory["dynamic_tail_bytes"]
    assert memory["staged_inputs"]["x"] >= memory["arena_bytes"] and tail >= 2 * 33 * 3 * 4
    assert f" + {tail:,} B after it (dims slots, run status, kernel scratch; staged input 'x')" in proc.stdout
    assert "data-dependent" not in proc.stdout


def test_build_refuses_what_no_run_can_bind():
    from fluidml_xc.pipeline import LowerOptions, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    spec = machine_spec(get_board(None))
    case = DynamicCase({"W": SymRange("W", 2, 9, 4)})
    x = case.input("x", np.float32, (W * 2,))
    case.node("Relu", [x], [(np.float32, (W * 2,))])
    with pytest.raises(InputError, match=r"input 'x' dim 0 is W\*2, an expression: declare that dim as a symbol"):
        lower(case.graph, spec, LowerOptions(opt="plain"))
    case = DynamicCase({"W": SymRange("W", 2, 9, 4), "H": SymRange("H", 1, 3, 2)})
    x = case.input("x", np.float32, (W,))
    case.node("Relu", [x], [(np.float32, (W,))])
    with pytest.raises(InputError, match=r"symbol H varies but is no input's dim.*--dim H=N"):
        lower(case.graph, spec, LowerOptions(opt="plain"))


def test_artifact_runs_every_size_here(host_artifact):
    from fluidml_xc.run.execute import random_feeds, run_artifact

    result, model = host_artifact
    manifest, names = result.manifest, [o.name for o in result.manifest.outputs]
    assert manifest.symbols == {"W": {"min": LO, "max": HI, "opt": 8}}
    assert [e.dims for e in manifest.inputs] == [(2, "W", 3), ("W", 5)]
    assert [e.shape for e in manifest.inputs] == [(2, HI, 3), (HI, 5)]
    assert names == ["relu1_0", "relu2_0", "x", "relu1_0"]
    header = (result.artifact / "model.h").read_text()
    assert '"W" 1..33 (opt 8)' in header and "[2, W=1..33, 3]" in header and "FXC_ERR_SHAPE = -6" in header
    assert manifest.memory["dynamic_tail_bytes"] >= 2 * HI * 3 * 4  # x is staged in the tail
    for w in SIZES:
        res = run_artifact(result.artifact, _feeds(w))
        _check(list(res.slots), names, model, _feeds(w))
    small = random_feeds(manifest, symbols={"W": 4})
    assert {k: v.shape for k, v in small.items()} == {"x": (2, 4, 3), "p": (4, 5)}
    _check(list(run_artifact(result.artifact, small).slots), names, model, small)
    profiled = run_artifact(result.artifact, _feeds(5), profile=True)
    _check(list(profiled.slots), names, model, _feeds(5))
    assert [op["name"] for op in profiled.bench["ops"]] == [op["name"] for op in manifest.ops]
    for feeds, message in REFUSALS:
        with pytest.raises(InputError, match=message):
            run_artifact(result.artifact, feeds)


def test_runner_refuses_bad_feeds_in_one_line(host_artifact, tmp_path):
    result, model = host_artifact
    runner = result.artifact / "runner"
    for k, (feeds, message) in enumerate(REFUSALS):
        args = []
        for name, value in feeds.items():
            np.save(tmp_path / f"{k}{name}.npy", value)
            args += ["-i", str(tmp_path / f"{k}{name}.npy")]
        out = tmp_path / f"{k}.out.npy"
        proc = subprocess.run([str(runner), *args, "-o", str(out)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("runner: error: ") and message in proc.stderr
        assert not out.exists()
    np.save(tmp_path / "rank.npy", np.zeros((2, 3), np.float32))
    proc = subprocess.run([str(runner), "-i", str(tmp_path / "rank.npy")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "has rank 2, 'x' has rank 3" in proc.stderr
    proc = subprocess.run([str(runner), "-o", str(tmp_path / "max.npy")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and np.load(tmp_path / "max.npy").shape == (2, HI, 3)  # no -i: every input at its maximum
    np.save(tmp_path / "x5.npy", _feeds(5)["x"])  # p not given: it takes its maximum W=33, x sets W=5
    proc = subprocess.run([str(runner), "-i", str(tmp_path / "x5.npy")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == (
        f"runner: error: input 'p' dim 0 is {HI}, but input 'x' set W=5: input 'p' got no -i and took the maximum "
        "shape: give every input with -i, at sizes within the model's ranges\n")


def test_cli_run_verify_inspect(host_artifact, tmp_path, capsys):
    from fluidml_xc.cli import main
    from fluidml_xc.run.execute import save_npz

    result, _ = host_artifact
    art = str(result.artifact)
    save_npz(tmp_path / "w7.npz", _feeds(7))
    save_npz(tmp_path / "big.npz", REFUSALS[0][0])
    assert main(["run", art, "--inputs", str(tmp_path / "w7.npz"), "--outputs", str(tmp_path / "o.npz")]) == 0
    assert np.load(tmp_path / "o.npz")["relu1_0"].shape == (2, 7, 3)
    assert main(["verify", art, "--inputs", str(tmp_path / "w7.npz"), "--oracle", "ort"]) == 0
    capsys.readouterr()
    assert main(["run", art, "--inputs", str(tmp_path / "big.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"outside W={LO}..{HI}" in err[0]
    assert main(["profile", art, "--local", "--inputs", str(tmp_path / "big.npz"), "--runs", "2"]) == 2
    assert f"outside W={LO}..{HI}" in capsys.readouterr().err
    assert main(["profile", art, "--local", "--inputs", str(tmp_path / "w7.npz"), "--runs", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["ops"]) == len(result.manifest.ops)
    assert main(["inspect", art]) == 0
    text = capsys.readouterr().out
    assert "-> 2xWx3 float32 (W=1..33)" in text
    assert f"the arena is planned at the maximum (W={HI})" in text and "at min: live peak" in text
    assert "input x staged with the maximum's strides at offset" in text and "(after the tail)" in text


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_artifact_runs_under_qemu(board, board_runner, tmp_path):
    """64-bit and 32-bit targets (the entry's staging and compaction arithmetic is i64 on both)."""
    from fluidml_xc.build import BuildOptions, build_graph
    from fluidml_xc.run.execute import run_artifact

    board = board_runner(board).board
    case = _case()
    result = build_graph(case.graph, BuildOptions(board=board, out_dir=tmp_path / "art", opt="plain", name="dyn",
                                                  profile_runner=False, record_last=False))  # named: the runner's mapped glue names
    names, model = case.graph.outputs, _onnx_model(case)
    for w in (LO, 9, HI):
        _check(list(run_artifact(result.artifact, _feeds(w), timeout=300).slots), names, model, _feeds(w))
    with pytest.raises(InputError, match="outside W"):
        run_artifact(result.artifact, REFUSALS[0][0])


def _sanitized_runner(host_artifact, tmp_path):
    """The dynamic artifact's runner rebuilt with AddressSanitizer + UBSan: (build result, model, runner path)."""
    from test_fuzz import sanitized_runner

    result, model = host_artifact
    return result, model, sanitized_runner(result.artifact, tmp_path)


def test_runner_under_asan_and_ubsan_at_the_range_edges(host_artifact, tmp_path):
    """The runner, glue and model built with AddressSanitizer + UBSan: min and max run clean, one past either end
    and a conflicting symbol are refused before any read or write."""
    result, model, runner = _sanitized_runner(host_artifact, tmp_path)
    names = [o.name for o in result.manifest.outputs]
    cases = [(_feeds(LO), None), (_feeds(HI), None), *REFUSALS[:2], REFUSALS[3]]
    for k, (feeds, refusal) in enumerate(cases):
        args = []
        for name, value in feeds.items():
            np.save(tmp_path / f"{k}{name}.npy", value)
            args += ["-i", str(tmp_path / f"{k}{name}.npy")]
        outs = [tmp_path / f"{k}.out{i}.npy" for i in range(len(names))]
        proc = subprocess.run([str(runner), *args, *[a for o in outs for a in ("-o", str(o))]], capture_output=True,
                              text=True, timeout=120)
        assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr[-2000:]
        if refusal:
            assert proc.returncode == 2 and refusal in proc.stderr and not any(o.exists() for o in outs)
        else:
            assert proc.returncode == 0, proc.stderr
            _check([np.load(o) for o in outs], names, model, feeds)


USER_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "model.h"

static unsigned char arena[FXC_ARENA_BYTES + 1] __attribute__((aligned(FXC_ARENA_ALIGN)));
static float x[2 * 33 * 3], p[33 * 5], y[2 * 33 * 3], z[33 * 5], xo[2 * 33 * 3], y2[2 * 33 * 3];

static int run(int64_t wx, int64_t wp)
{
    const int64_t xd[3] = {2, wx, 3}, pd[2] = {wp, 5};
    const int64_t *shapes[2] = {xd, pd};
    const void *in[2] = {x, p};
    void *out[4] = {y, z, xo, y2};
    return fxc_run_shaped(arena, in, shapes, out);
}

int main(void)
{
    if (fxc_init(arena, sizeof arena) != FXC_OK)
        return 1;
    for (int i = 0; i < 2 * 5 * 3; i++)
        x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 5 * 5; i++)
        p[i] = (float)(i % 5) - 2.0f;
    int rc = run(5, 5);
    const int64_t *dims = fxc_output_shape(arena, 0);
    printf("%d %s %d %lld %lld %lld\n", rc, fxc_symbols[0].name, FXC_NUM_SYMBOLS, (long long)dims[0],
           (long long)dims[1], (long long)dims[2]);
    for (int i = 0; i < 2 * 5 * 3; i++)
        printf("%g ", y[i]);
    printf("\n");
    memset(y, 0x55, sizeof y);
    rc = run(5, 6);
    int untouched = y[0] == y[sizeof y / sizeof y[0] - 1];
    printf("%d %d %s\n", rc == FXC_ERR_SHAPE, untouched, fxc_shape_error());
    rc = run(34, 34);
    printf("%d %s\n", rc == FXC_ERR_SHAPE, fxc_strerror(rc));
    const int64_t *none[2] = {NULL, NULL};
    printf("%d %d\n", fxc_check_input_shapes(NULL) == FXC_ERR_NULL, fxc_check_input_shapes(none) == FXC_ERR_NULL);
    return 0;
}
"""


def test_user_program_gives_dims_and_reads_refusals(host_artifact, tmp_path):
    """The C API as an application uses it: fxc_run_shaped, the output's actual dims, FXC_ERR_SHAPE and its message,
    and no output byte written on a refusal."""
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_board

    result, model = host_artifact
    art = result.artifact
    src = tmp_path / "app.c"
    src.write_text(USER_PROGRAM)
    exe = compile_c_program(get_board(None).target, "", [src], [art], [art / "libmodel.a", "-lm"], tmp_path / "app")
    lines = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    assert lines[0] == "0 W 1 2 5 3"
    x = ((np.arange(30) % 7) - 3).astype(np.float32).reshape(2, 5, 3)
    np.testing.assert_array_equal(np.array(lines[1].split(), np.float32), np.maximum(x, 0).reshape(-1))
    assert lines[2] == "1 1 input 'p' dim 0 is 6, but input 'x' set W=5"
    assert lines[3] == f"1 input 'x' dim 1 is 34, outside W={LO}..{HI}"
    assert lines[4] == "1 1"
    header = (art / "model.h").read_text()
    assert "FXC_OK when fxc_run_shaped would take these input dims, FXC_ERR_NULL when `shapes` or the dims" in header


def test_docs_show_dims_as_model_h_prints_them():
    """docs/DYNAMIC_RUN.md's example of a varying output's dims is the text model.h prints for W // 4, and its
    fxc_check_input_shapes line names the FXC_ERR_NULL that the program above gets."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "DYNAMIC_RUN.md").read_text()
    assert f"`[1, {W // 4}, 37], at most [1, 256, 37]`" in text and "W//4" not in text
    assert "fxc_check_input_shapes(shapes);          /* FXC_OK, FXC_ERR_SHAPE, or FXC_ERR_NULL" in text


def test_staged_input_takes_a_gap_of_the_plan():
    """x [2, W, 3] is read only by the first node: its staging buffer shares the offset of a buffer first written
    later (no reuse under --opt plain: the plan has such a gap), so the arena does not grow; every size still
    matches onnx.reference."""
    from fluidml_xc.pipeline import LowerOptions, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    case = DynamicCase({"W": SymRange("W", LO, HI, 8)})
    x = case.input("x", np.float32, (2, W, 3))
    (a,) = case.node("Relu", [x], [(np.float32, (2, W, 3))], output=False)
    (b,) = case.node("Neg", [a], [(np.float32, (2, W, 3))], output=False)
    case.node("Relu", [b], [(np.float32, (2, W, 3))])
    lowered = lower(case.graph, machine_spec(get_board(None)), LowerOptions(opt="plain"))
    plan, staged = lowered.plan, lowered.emitter.boundary.staged
    assert staged["x"] == plan.offsets[b] and lowered.emitter.boundary.staged_bytes == 0
    assert lowered.tail.arena_bytes < plan.arena_bytes + 64  # only the output's dims slot after the plan
    jit, model = JitModel(lowered), _onnx_model(case)
    for w in SIZES:
        feeds = {"x": np.random.default_rng(w).standard_normal((2, w, 3)).astype(np.float32)}
        _check(jit(feeds), case.graph.outputs, model, feeds)


DIMS_EDITS = [b"(2, 34, 3)", b"(2, 32, 3)", b"(2, 1, 3)", b"(2, 0, 3)", b"(2, 9999999999999, 3)", b"(2, 33)",
              b"(2, 33, 3, 1)", b"(3, 33, 3)", b"(2, 33, 4)", b"(2, -33, 3)"]
"""Header dims around the range's maximum (p, given no -i, runs at W=33: x must say 33 too)."""


def test_fuzzed_npy_through_the_dynamic_runner_under_asan(host_artifact, tmp_path):
    """Mutated .npy files of x (dims edited around the range's edges, header and payload mutations of
    tests/fuzzing.py) through the ASan + UBSan runner: exit 0 with the right outputs or exit 2 with one line,
    never a sanitizer report."""
    import random

    from fuzzing import mutate_npy, npy_bytes
    result, model, runner = _sanitized_runner(host_artifact, tmp_path)
    base = npy_bytes(np.linspace(-1, 1, 2 * HI * 3, dtype=np.float32).reshape(2, HI, 3))
    rng = random.Random(26)
    cases = [base.replace(b"(2, 33, 3)", edit, 1) for edit in DIMS_EDITS] + [base[:-5]]
    cases += [mutate_npy(base, rng)[0] for _ in range(40)]
    accepted = 0
    for k, data in enumerate(cases):
        path, out = tmp_path / f"f{k}.npy", tmp_path / f"f{k}.out.npy"
        path.write_bytes(data)
        proc = subprocess.run([str(runner), "-i", str(path), "-o", str(out)], capture_output=True, text=True,
                              errors="replace", timeout=120)
        assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr[-2000:]
        if proc.returncode == 2:
            assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists(), proc.stderr
            continue
        assert proc.returncode == 0, proc.stderr
        x = np.load(path, allow_pickle=False)
        np.testing.assert_array_equal(np.load(out), np.maximum(np.maximum(x, 0), 0))
        accepted += 1
    assert 0 < accepted < len(cases)


def test_verify_and_profile_on_a_board_at_the_size_fed(host_artifact, loopback_sshd, tmp_path, capsys):
    """Over SSH (a real sshd on 127.0.0.1): verify and profile --inputs at W=9 upload the feeds, run there and leave
    no scratch directory; a feed out of range is refused before anything is uploaded."""
    from fluidml_xc.cli import main
    from fluidml_xc.run.execute import save_npz

    result, _ = host_artifact
    base = tmp_path / "board"
    common = [*loopback_sshd.args(), "--base-dir", str(base)]
    save_npz(tmp_path / "w9.npz", _feeds(9))
    save_npz(tmp_path / "big.npz", REFUSALS[0][0])
    assert main(["verify", str(result.artifact), "--inputs", str(tmp_path / "w9.npz"), "--oracle", "ort", *common]) == 0
    assert "2x9x3" in capsys.readouterr().out
    assert main(["profile", str(result.artifact), "--inputs", str(tmp_path / "w9.npz"), "--runs", "3", "--json",
                 *common]) == 0
    assert len(json.loads(capsys.readouterr().out)["ops"]) == len(result.manifest.ops)
    assert not list(base.glob(".run-*")) and not list(base.glob(".profile-*"))
    assert main(["profile", str(result.artifact), "--inputs", str(tmp_path / "big.npz"), *common]) == 2
    assert f"outside W={LO}..{HI}" in capsys.readouterr().err


def test_deploy_smoke_run_at_the_size_fed(host_artifact, loopback_sshd, tmp_path, capsys):
    """deploy --inputs runs the model once on the board at the size fed (outputs at their actual shapes); a feed out
    of range is refused before anything is uploaded; the `run` line says the runner's own inputs are the maximum."""
    from fluidml_xc.cli import main
    from fluidml_xc.run.execute import save_npz

    result, _ = host_artifact
    base = tmp_path / "board"
    common = [*loopback_sshd.args(), "--base-dir", str(base)]
    save_npz(tmp_path / "big.npz", REFUSALS[0][0])
    assert main(["deploy", str(result.artifact), "--inputs", str(tmp_path / "big.npz"), *common]) == 2
    assert f"outside W={LO}..{HI}" in capsys.readouterr().err and not base.exists()
    save_npz(tmp_path / "w9.npz", _feeds(9))
    assert main(["deploy", str(result.artifact), "--inputs", str(tmp_path / "w9.npz"), *common]) == 0
    out = capsys.readouterr().out
    assert f"(inputs at the maximum of W={LO}..{HI}; -i FILE.npy takes any size in them)" in out
    assert "smoke run ok at W=9: relu1_0 2x9x3, relu2_0 9x5, x 2x9x3" in out
    assert main(["deploy", str(result.artifact), "--inputs", str(tmp_path / "w9.npz"), "--json", *common]) == 0
    smoke = json.loads(capsys.readouterr().out)["smoke_run"]
    assert smoke == {"sizes": {"W": 9}, "outputs": {"relu1_0": [2, 9, 3], "relu2_0": [9, 5], "x": [2, 9, 3]}}
    assert not list(base.glob(".run-*"))


def test_report_shows_the_ranges_and_the_size_of_each_profile(host_artifact, tmp_path):
    """report: the ranges, the inputs' dims, the arena planned at the maximum and what is in use at the minimum, and
    the size each profile was taken at (profile --json records it: the size fed, else the maximum)."""
    import html
    import re

    from fluidml_xc.cli import main
    from fluidml_xc.run.execute import save_npz

    result, _ = host_artifact
    save_npz(tmp_path / "w9.npz", _feeds(9))
    for name, extra in (("p9", ["--inputs", str(tmp_path / "w9.npz")]), ("pmax", [])):
        assert main(["profile", str(result.artifact), "--local", "--runs", "3", *extra,
                     "--json-out", str(tmp_path / f"{name}.json")]) == 0
    assert json.loads((tmp_path / "p9.json").read_text())["sizes"] == {"W": 9}
    assert json.loads((tmp_path / "pmax.json").read_text())["sizes"] == {"W": HI}
    assert main(["report", str(result.artifact), "--profile", str(tmp_path / "p9.json"), "--profile",
                 str(tmp_path / "pmax.json"), "-o", str(tmp_path / "r.html")]) == 0
    page = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<svg.*?</svg>", "", (
        tmp_path / "r.html").read_text(), flags=re.S))))
    plan = result.manifest.memory["plan"]
    at_min = max(plan["offsets"][n] + s for n, s in plan["sizes_at_min"].items())
    for text in (f"ranges W {LO}..{HI} (opt 8)", f"inputs x [2, W={LO}..{HI}, 3]; p [W={LO}..{HI}, 5]",
                 f"(planned at max W={HI})", f"arena in use at min {at_min / 1024:,.1f} KiB at min W={LO}",
                 "live peak at min", f"one build for W {LO}..{HI} (opt 8)", "size profiled W=9",
                 f"size profiled W={HI}", f"the same offsets at the minimum W={LO}"):
        assert text in page, text
