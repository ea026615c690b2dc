"""Test helpers: build an ONNX model with fluidml-xc, run its runner (natively or under qemu), return outputs."""
from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx

from fluidml_xc.build import BuildOptions, build_model


def graph_model(nodes, feeds: dict[str, np.ndarray], outputs, consts: dict | None = None, opset: int = 17,
                ir_version: int = 8, extra_opsets=(), infer: bool = False) -> onnx.ModelProto:
    """A one-graph model: graph inputs `feeds` (name -> array), initializers `consts`, outputs by name;
    `infer` runs ONNX's strict shape inference over it."""
    from onnx import helper, numpy_helper
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (consts or {}).items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(n) for n in outputs], inits)
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = ir_version
    return onnx.shape_inference.infer_shapes(m, strict_mode=True) if infer else m


def has_emulator(board: str) -> bool:
    from fluidml_xc.target.boards import get_board
    emulator = get_board(board).target.emulator
    return not emulator or shutil.which(emulator) is not None


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


def run(artifact: Path, feeds: dict[str, np.ndarray], timeout: float = 600) -> dict[str, np.ndarray]:
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
        emulator = [manifest["emulator"]] if manifest["emulator"] else []
        subprocess.run(emulator + [str(Path(artifact) / "runner"), *args], check=True, timeout=timeout, capture_output=True)
        return {spec["name"]: np.load(path) for spec, path in zip(manifest["outputs"], outs)}


def compile_and_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], workdir: Path, board: str = "x86_64", **options) -> dict[str, np.ndarray]:
    return run(build(model, workdir, board, **options), feeds)


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
