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


def has_emulator(board: str) -> bool:
    from fluidml_xc.boards import get_board
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
