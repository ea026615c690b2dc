"""Test helpers: build an ONNX model with fluidml-xc, run its runner (natively or under qemu), return outputs;
the emulator check, the node JIT, the CLI in a subprocess and the common model builders.

One policy for emulators: CI installs qemu-user-static (.ci/run), so a board whose emulator is missing FAILS the
test in one line naming the package (`require_emulator`); nothing skips for it.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.emit.measure import compile_node
from fluidml_xc.pipeline import import_graph
from fluidml_xc.run.backend import compile_model
from fluidml_xc.target.boards import get_board, get_target
from fluidml_xc.target.machine import machine_spec

ROOT = Path(__file__).resolve().parent.parent
QEMU_PACKAGE = "qemu-user-static"


def graph_model(nodes, feeds: dict[str, np.ndarray], outputs, consts: dict | None = None, opset: int = 17,
                ir_version: int | None = 8, extra_opsets=(), infer: bool = False) -> onnx.ModelProto:
    """A one-graph model: graph inputs `feeds` (name -> array), initializers `consts`, outputs by name;
    `infer` runs ONNX's strict shape inference over it; ir_version None keeps onnx's default."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (consts or {}).items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(n) for n in outputs], inits)
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    m = helper.make_model(graph, opset_imports=opsets)
    if ir_version is not None:
        m.ir_version = ir_version
    return onnx.shape_inference.infer_shapes(m, strict_mode=True) if infer else m


def float_model(nodes, inits: dict[str, np.ndarray], inputs: dict[str, np.ndarray], outputs, opset: int = 17,
                name: str = "g") -> onnx.ModelProto:
    """A float32 graph: inputs by example array (their shapes), initializers by value, outputs of unknown shape."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def proto_model(nodes, inputs, outputs, inits=(), opsets=(("", 17),), ir_version: int | None = 8, name: str = "g",
                check: bool = False, **model_fields) -> onnx.ModelProto:
    """A graph from ValueInfoProtos and TensorProtos as given; ir_version None keeps onnx's default;
    `check` runs onnx.checker (check="full": its full check)."""
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], **model_fields)
    if ir_version is not None:
        model.ir_version = ir_version
    if check:
        onnx.checker.check_model(model, full_check=check == "full")
    return model


def rand(*shape, seed: int = 0) -> np.ndarray:
    """Standard normal float32 of `shape`, seeded by `seed` plus the sum of the dims."""
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def conv_add_clip_model(w_shape, attrs: dict, x_shape) -> onnx.ModelProto:
    """y = Clip(Conv(x, w, b) + r, -0.3, 0.8), the Conv node named "conv"; r has the Conv's output shape."""
    inits = {"w": rand(*w_shape, seed=50), "b": rand(w_shape[0], seed=51),
             "lo": np.array(-0.3, np.float32), "hi": np.array(0.8, np.float32)}
    probe = float_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)], inits,
                        {"x": np.zeros(x_shape, np.float32)}, ["c"])
    out_shape = import_graph(probe).tensors["c"].shape
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    return float_model(nodes, inits, {"x": np.zeros(x_shape, np.float32), "r": np.zeros(out_shape, np.float32)}, ["y"])


def matmul_relu_model(seed: int) -> onnx.ModelProto:
    """MatMul + Add + Relu on a 2x8 input; the seed changes the weights (and so the artifact)."""
    rng = np.random.default_rng(seed)
    weights = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [weights, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def require_program(name: str, package: str = QEMU_PACKAGE) -> str:
    """The path of `name`; missing, the test fails in one line naming the package (CI installs it)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} missing: apt-get install {package} (.ci/run installs it)", pytrace=False)
    return path


def require_emulator(board: str) -> list[str]:
    """The command prefix that runs `board`'s programs here: [] natively, [emulator, its options] else (missing: a
    failure); qemu-riscv64-rvv's code needs `-cpu rv64,v=true,vlen=256`."""
    resolved = get_board(board)
    emulator = resolved.target.emulator
    return [require_program(emulator), *resolved.target.emulator_args(resolved.features)] if emulator else []


@dataclass(frozen=True)
class BoardRunner:
    """Builds for one board and runs its programs here, under the board's emulator when it has one."""

    board: str
    prefix: tuple[str, ...]

    def build(self, model: onnx.ModelProto | Path, workdir: Path, **options) -> Path:
        return build(model, workdir, self.board, **options)

    def compile_and_run(self, model: onnx.ModelProto, feeds: dict[str, np.ndarray], workdir: Path, **options):
        return run(self.build(model, workdir, **options), feeds)

    def exec(self, argv: list, **kwargs) -> subprocess.CompletedProcess:
        """subprocess.run of a program built for the board (text output captured, 120 s unless told)."""
        kwargs = {"capture_output": True, "text": True, "timeout": 120, **kwargs}
        return subprocess.run([*self.prefix, *map(str, argv)], **kwargs)


def board_runner(board: str) -> BoardRunner:
    return BoardRunner(board, tuple(require_emulator(board)))


def build(model: onnx.ModelProto | Path, workdir: Path, board: str = "x86_64", **options) -> Path:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if isinstance(model, onnx.ModelProto):
        path = workdir / "model.onnx"
        onnx.save(model, str(path))
    else:
        path = Path(model)
    out = workdir / f"artifact-{board}-{options.get('opt', 'fluid')}"
    return build_model(path, BuildOptions(board=board, out_dir=out, record_last=False, **options)).artifact


def run(artifact: Path, feeds: dict[str, np.ndarray], timeout: float = 600, threads: int | None = None) -> dict[str, np.ndarray]:
    """The artifact's runner on `feeds` (under its emulator, with the CPU options its features need), outputs by
    name; `threads`: the runner's --threads."""
    manifest = json.loads((Path(artifact) / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for k, spec in enumerate(manifest["inputs"]):
            path = f"{tmp}/in{k}.npy"
            np.save(path, np.asarray(feeds[spec["name"]]).astype(spec["dtype"]).reshape(spec["shape"]))
            args += ["-i", path]
        outs = []
        for k, _ in enumerate(manifest["outputs"]):
            outs.append(f"{tmp}/out{k}.npy")
            args += ["-o", outs[-1]]
        emulator = [require_program(manifest["emulator"]),
                    *get_target(manifest["target"]).emulator_args(manifest["features"])] if manifest["emulator"] else []
        args += ["--threads", str(threads)] if threads is not None else []
        subprocess.run(emulator + [str(Path(artifact) / "runner"), *args], check=True, timeout=timeout, capture_output=True)
        return {spec["name"]: np.load(path) for spec, path in zip(manifest["outputs"], outs)}


def compile_and_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], workdir: Path, board: str = "x86_64", **options) -> dict[str, np.ndarray]:
    return run(build(model, workdir, board, **options), feeds)


def jit_node(graph, node, layouts: dict, order: str | None = None, seed: int = 5, spec=None):
    """Run one node's kernel with llvmlite's MCJIT on buffers stored in `layouts` (constants as they are, the
    other tensors standard normal from `seed`): (logical values by name, the output in logical order)."""
    kernel = compile_node(graph, node, spec or machine_spec(get_board(None)), layouts, order)
    rng = np.random.default_rng(seed)
    logical = {n: graph.tensors[n].value for n in node.inputs if n and graph.tensors[n].is_const}
    stored = []
    for name in kernel.names:
        t = graph.tensors[name]
        value = t.value if t.is_const else rng.standard_normal(t.shape).astype(np.float32)
        logical[name] = value
        perm = layouts.get(name) if not t.is_const else None
        stored.append(np.ascontiguousarray(np.transpose(value, perm) if perm else value).copy())
    kernel.call(*[ctypes.c_void_p(a.ctypes.data) for a in stored])
    perm = layouts.get(kernel.names[-1])
    return logical, (np.transpose(stored[-1], np.argsort(perm)) if perm else stored[-1])


def jit_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], board: str | None = None) -> dict[str, np.ndarray]:
    """The model compiled in-process for `board` (default x86_64: llvmlite's MCJIT) and run on `feeds`: outputs by name."""
    return dict(zip([o.name for o in model.graph.output], compile_model(model, board)(feeds)))


def cli(*args: str, cwd: Path | None = None, pre: str = "", env: dict | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """`fluidml-xc ARGS` of this checkout in a fresh Python (`pre`: statements run first; `env`: added variables)."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'toolkit')!r}); {pre}"
            "from fluidml_xc.cli import main; sys.exit(main())")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one `fluidml-xc: error: ...` line of a failed run (no traceback, nothing else on stderr)."""
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fluidml-xc: error: "), proc.stderr
    return lines[0]


def save_relu_model(path: Path) -> Path:
    """y = Relu(x) on a float [4], saved to `path`."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def check_model(workdir: Path, m: onnx.ModelProto, feeds: dict[str, np.ndarray], board: str = "x86_64",
                rtol: float = 1e-4, atol: float = 1e-5, oracle=None) -> None:
    """Build `m` for `board`, run it on `feeds` and compare every output's shape, dtype and values with
    `oracle` (default onnx.reference)."""
    got = compile_and_run(m, feeds, workdir, board, profile_runner=False)
    for name, expected in (oracle or reference)(m, feeds).items():
        assert got[name].shape == expected.shape, name
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_allclose(got[name], expected, rtol=rtol, atol=atol, err_msg=name)


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from onnx.reference import ReferenceEvaluator
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


def lrn_numpy(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN as the ONNX spec defines it (onnx.reference's fills only the first batch-size channels)."""
    sq = np.zeros_like(x)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    for c in range(x.shape[1]):
        sq[:, c] = (x[:, max(0, c - before):c + after + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


def build_uncached(model: onnx.ModelProto, workdir: Path, board: str = "x86_64", **options):
    """build_model of `model` saved in workdir, without the kernel cache (a test that patches a kernel's choice
    builds units the cache's keys would not tell apart): the BuildResult."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.onnx"
    onnx.save(model, str(path))
    return build_model(path, BuildOptions(board=board, out_dir=workdir / "out", record_last=False, cache=False,
                                          **options))


def assert_same_bits_at_thread_counts(artifact: Path, feeds: dict[str, np.ndarray], counts=(1, 2, 3, 4)) -> None:
    """Every output of the artifact the same bytes at each thread count."""
    outs = [run(artifact, feeds, threads=t) for t in counts]
    for out in outs[1:]:
        assert all(out[name].tobytes() == outs[0][name].tobytes() for name in out)


def unit_texts(model: onnx.ModelProto, spec, wanted, **imports) -> dict[str, str]:
    """The IR text of the unit of each node `wanted(node)` accepts, by node name, as a parallel unit build emits
    it for `spec` (imports: import_graph's options, e.g. conv_algo)."""
    from fluidml_xc.emit import units
    from fluidml_xc.emit.emitter import EmitOptions, ModuleEmitter
    from fluidml_xc.pipeline import LowerOptions, plan

    planned = plan(import_graph(model, **imports), spec, LowerOptions())
    options = EmitOptions(unit=True, parallel=True, layouts=planned.decisions.layouts,
                          loop_orders=planned.decisions.loop_orders)
    emitter = ModuleEmitter(planned.graph, planned.plan, spec, options)
    return {n.name: units.emit_unit(units.local_view(emitter, n), spec).ir_text for n in planned.graph.nodes
            if wanted(n)}
