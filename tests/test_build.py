"""The compiler spine end to end: example models built for every target, run, compared with ONNX Runtime."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from elftools.elf.elffile import ELFFile

from fluidml_xc.examples import EXAMPLES, example_feeds
from fluidml_xc.emit.link import compile_c_program
from fluidml_xc.target.boards import get_board
from fluidml_xc.reference import reference_outputs
from modelrun import build, require_emulator, run

BOARDS = ["x86_64", "rpi4", "rpi3"]
ELF = {"x86_64": ("EM_X86_64", "ELFCLASS64"), "rpi4": ("EM_AARCH64", "ELFCLASS64"), "rpi3": ("EM_ARM", "ELFCLASS32")}
EF_ARM_ABI_FLOAT_HARD = 0x400


def _check(model: onnx.ModelProto, board: str, tmp_path, rtol=1e-4):
    require_emulator(board)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    feeds = example_feeds(model)
    artifact = build(path, tmp_path, board)
    got = run(artifact, feeds)
    for name, ref in reference_outputs(path, feeds).items():
        assert got[name].shape == ref.shape and got[name].dtype == ref.dtype
        scale = float(np.max(np.abs(ref)))
        assert float(np.max(np.abs(got[name] - ref))) <= rtol * scale + 1e-6, name
    return artifact


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_models_match_onnxruntime(example, board, tmp_path):
    artifact = _check(EXAMPLES[example](), board, tmp_path)
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["board"] == board and manifest["triple"] == get_board(board).target.triple


@pytest.fixture(scope="module")
def cnn_artifacts(tmp_path_factory):
    built = {}
    model = EXAMPLES["tiny_cnn"]()
    for board in BOARDS:
        work = tmp_path_factory.mktemp(board)
        path = work / "m.onnx"
        onnx.save(model, str(path))
        built[board] = build(path, work, board)
    return built


@pytest.mark.parametrize("board", BOARDS)
def test_artifact_files_manifest_and_elf(board, cnn_artifacts):
    artifact = cnn_artifacts[board]
    assert {"model.o", "model.h", "libmodel.a", "runner", "runner_prof", "manifest.json", "model_glue.c"} <= {p.name for p in artifact.iterdir()}
    m = json.loads((artifact / "manifest.json").read_text())
    for key in ("model", "board", "triple", "cpu", "features", "tools", "inputs", "outputs", "op_counts", "memory", "footprint"):
        assert key in m
    assert len(m["model"]["sha256"]) == 64
    assert m["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert m["outputs"] == [{"name": "probs", "shape": [1, 10], "dtype": "float32"}]
    assert m["op_counts"]["Conv"] == 3 and "BatchNormalization" not in m["op_counts"]
    assert m["memory"]["arena_bytes"] >= m["memory"]["lower_bound_bytes"] > 0
    assert m["footprint"]["text"] > 0 and m["footprint"]["rodata"] >= m["weights_bytes"] > 0
    assert {"llvmlite", "onnx", "llvm"} <= set(m["tools"])
    machine, elf_class = ELF[board]
    for exe in ("runner", "runner_prof"):
        with open(artifact / exe, "rb") as fh:
            elf = ELFFile(fh)
            assert elf["e_machine"] == machine and elf.elfclass == int(elf_class[-2:])
            assert elf["e_type"] == "ET_EXEC" or elf["e_type"] == "ET_DYN"
            if machine == "EM_ARM":
                assert elf["e_flags"] & EF_ARM_ABI_FLOAT_HARD
            assert not any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments()), "runner must be static"
    with open(artifact / "model.o", "rb") as fh:
        assert ELFFile(fh)["e_machine"] == machine
    header = (artifact / "model.h").read_text()
    assert "fxc_run" in header and "FXC_ARENA_BYTES" in header and '"input"' in (artifact / "model_glue.c").read_text()


@pytest.mark.parametrize("board", BOARDS)
def test_bench_and_profile_json(board, cnn_artifacts):
    from fluidml_xc.run.execute import run_artifact
    result = run_artifact(cnn_artifacts[board], bench=3, warmup=1, profile=True)
    bench = result.bench
    for key in ("runs", "median_ms", "p90_ms", "min_ms", "peak_rss_bytes"):
        assert key in bench
    assert bench["runs"] == 3 and bench["min_ms"] <= bench["median_ms"] <= bench["p90_ms"]
    assert [op["type"] for op in bench["ops"]].count("Conv") == 3


USER_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
int main(void) {
    void *arena = aligned_alloc(FXC_ARENA_ALIGN, (FXC_ARENA_BYTES + FXC_ARENA_ALIGN - 1) / FXC_ARENA_ALIGN * FXC_ARENA_ALIGN + FXC_ARENA_ALIGN);
    static float input[1 * 3 * 32 * 32], probs[10];
    for (int i = 0; i < 3 * 32 * 32; i++) input[i] = (float)((i * 7919) % 200 - 100) / 100.0f;
    const void *ins[] = {input};
    void *outs[] = {probs};
    if (fxc_init(arena, FXC_ARENA_BYTES) != 0) return 3;
    if (fxc_run(arena, ins, outs) != 0) return 4;
    for (int i = 0; i < 10; i++) printf("%.9g\n", probs[i]);
    return 0;
}
"""


def test_user_c_program_links_libmodel_for_aarch64(cnn_artifacts, tmp_path, board_runner):
    rpi4 = board_runner("rpi4")
    artifact = cnn_artifacts["rpi4"]
    src = tmp_path / "app.c"
    src.write_text(USER_PROGRAM)
    exe = compile_c_program(get_board("rpi4").target, "cortex-a72", [src], [artifact], [artifact / "libmodel.a", "-lm"], tmp_path / "app")
    out = rpi4.exec([exe], check=True).stdout
    got = np.array([float(v) for v in out.split()], dtype=np.float32)
    x = (((np.arange(3 * 32 * 32) * 7919) % 200 - 100) / 100.0).astype(np.float32).reshape(1, 3, 32, 32)
    model_path = tmp_path / "m.onnx"
    onnx.save(EXAMPLES["tiny_cnn"](), str(model_path))
    ref = reference_outputs(model_path, {"input": x})["probs"].reshape(-1)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_builds_leave_no_weights_in_zigs_cache(tmp_path):
    """zig caches what it assembles; the weights blob must not pile up in its global cache build after build."""
    import os
    from pathlib import Path
    from onnx import TensorProto, helper, numpy_helper
    zig_cache = Path(os.environ.get("ZIG_GLOBAL_CACHE_DIR") or Path.home() / ".cache" / "zig")

    def files() -> set:  # zig runs on other test workers meanwhile: its tmp folders come and go during the walk
        return {Path(d) / f for d, _, names in os.walk(zig_cache) for f in names}

    def holds(path: Path, data: bytes) -> bool:
        try:
            return path.stat().st_size >= len(data) and data in path.read_bytes()
        except FileNotFoundError:
            return False
    before = files()
    w = np.random.default_rng().standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 64))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 64))], [numpy_helper.from_array(w, "w")])
    build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    # only this build's weights count: builds on other test workers add their own objects meanwhile
    assert [p for p in files() - before if holds(p, w.tobytes())] == []


def test_a_rebuild_hashes_the_old_artifact_once_and_still_sees_a_change(tmp_path, monkeypatch):
    """The output directory is checked three times a build (issue #27: warm rebuild); its files' digests are read
    once while their fingerprint (inode, size, times) stays, and a file changed after a check is still refused."""
    import collections
    import os
    from pathlib import Path

    from modelrun import matmul_relu_model
    from fluidml_xc import build as build_module
    from fluidml_xc.build import BuildOptions, build_model

    model = tmp_path / "m.onnx"
    onnx.save(matmul_relu_model(0), str(model))
    out = tmp_path / "out"
    options = BuildOptions(board="x86_64", out_dir=out, record_last=False, profile_runner=False)
    build_model(model, options)
    from fluidml_xc import artifact

    hashed, real = [], artifact.sha256_file
    monkeypatch.setattr(artifact, "sha256_file", lambda path: hashed.append(Path(path)) or real(path))
    build_model(model, options)
    old = collections.Counter(p.name for p in hashed if p.parent == out.resolve())
    assert old and set(old.values()) == {1}, old
    assert build_module._foreign_entry(out) is None and build_module._foreign_entry(out) is None
    header = out / "model.h"
    stat, text = header.stat(), header.read_bytes()
    header.write_bytes(text.replace(b"#", b" ", 1))
    os.utime(header, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert build_module._foreign_entry(out) == "'model.h' was changed after the build"
