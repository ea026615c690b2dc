"""Several models in one program (build --name): prefixed C APIs, one shared runtime and thread pool, one
arena for models that run one after the other; runners, inspect and deploy of a named artifact."""
from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from elftools.elf.elffile import ELFFile
from onnx import helper

from modelrun import build, cli, graph_model, one_line_error, reference, require_emulator

C_DIR = Path(__file__).resolve().parent / "c"
BOARDS = ["x86_64", "qemu-aarch64"]
SHARED_MACROS = {"FXC_TENSOR_SPEC_DEFINED", "FXC_DTYPE_DEFINED", "FXC_PARALLEL_FOR_DEFINED", "FXC_PROF_HOOK_DEFINED",
                 "FXC_ARENA_MAX", "FXC_SYMBOL_RANGE_DEFINED"}
"""The runtime's vocabulary a named header may define (guarded, the same in every header)."""


def detector() -> tuple[onnx.ModelProto, dict]:
    """Conv + Relu + MaxPool + GlobalAveragePool: small ops that stay on the calling thread."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    consts = {"w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    return graph_model(nodes, {"x": x}, ["y"], consts), {"x": x}


def classifier() -> tuple[onnx.ModelProto, dict]:
    """MatMul (about 800k multiply-adds: split into tiles over the pool) + bias + Softmax."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    consts = {"w": (rng.standard_normal((128, 96)) * 0.1).astype(np.float32), "b": rng.standard_normal(96).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    return graph_model(nodes, {"x": x}, ["y"], consts), {"x": x}


MODELS = {"detector": (detector, 1), "classifier": (classifier, 2)}
"""name -> (model, --threads): the one-thread detector's init starts the pool, the classifier's grows it."""


@pytest.fixture(scope="module", params=BOARDS)
def named(request, tmp_path_factory) -> dict[str, tuple[Path, onnx.ModelProto, dict]]:
    """Both models built for one board, each from a file named model.onnx (same graph name: only --name tells
    their symbols apart)."""
    board = request.param
    require_emulator(board)
    work = tmp_path_factory.mktemp(f"named-{board}")
    built = {}
    for name, (make, threads) in MODELS.items():
        model, feeds = make()
        artifact = build(model, work / name, board, name=name, threads=threads, profile_runner=name == "classifier")
        built[name] = (artifact, model, feeds)
    return built


def _archive_members(path: Path) -> list[bytes]:
    """The ELF members of an ar archive (what the linker sees)."""
    data = path.read_bytes()
    assert data.startswith(b"!<arch>\n")
    members, pos = [], 8
    while pos + 60 <= len(data):
        size = int(data[pos + 48:pos + 58])
        body = data[pos + 60:pos + 60 + size]
        if body.startswith(b"\x7fELF"):
            members.append(body)
        pos += 60 + size + (size & 1)
    return members


def _defined_globals(elf_bytes: bytes) -> dict[str, str]:
    """Defined global and weak symbols of one object: name -> binding ("COMMON" for a common symbol)."""
    elf = ELFFile(io.BytesIO(elf_bytes))
    table = elf.get_section_by_name(".symtab")
    return {s.name: "COMMON" if s["st_shndx"] == "SHN_COMMON" else s["st_info"]["bind"] for s in table.iter_symbols()
            if s.name and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")}


def test_named_artifact_files_header_and_manifest(named):
    for name, (artifact, _, _) in named.items():
        files = {p.name for p in artifact.iterdir()}
        assert {f"{name}.h", f"{name}_glue.c", f"{name}.o", f"lib{name}.a", "libfxc_runtime.a", "runner"} <= files
        assert not {"model.h", "libmodel.a", "model.o"} & files
        manifest = json.loads((artifact / "manifest.json").read_text())
        assert manifest["c_api"] == {"name": name, "prefix": f"{name}_", "macro_prefix": f"{name.upper()}_",
                                     "header": f"{name}.h", "library": f"lib{name}.a", "runtime_library": "libfxc_runtime.a"}
        header = (artifact / f"{name}.h").read_text()
        macros = set(re.findall(r"^#define (\w+)", header, flags=re.M))
        assert macros - SHARED_MACROS and all(m.startswith(f"{name.upper()}_") for m in macros - SHARED_MACROS)
        for word in (f"int {name}_init(", f"int {name}_run(", f"{name.upper()}_ARENA_BYTES", f"typedef fxc_tensor_spec {name}_tensor_spec;",
                     f"extern const size_t {name}_arena_bytes;"):
            assert word in header
        assert "fxc_init" not in header and "FXC_ARENA_BYTES" not in header and "FXC_OK" not in header
    runtimes = {name: (artifact / "libfxc_runtime.a").read_bytes() for name, (artifact, _, _) in named.items()}
    assert runtimes["detector"] == runtimes["classifier"], "one runtime per board: the same bytes beside every model"


def test_libraries_export_disjoint_symbols(named):
    """Each library defines only its own name's symbols (plus the runtime's weak serial parallel-for, which the
    shared runtime's strong one replaces, the weak per-node units fxc_k_* and constants fxc_c_*, named by their
    key or content: two models with the same ones share them, and the convs' zeroed rows, a common symbol the linker
    makes one block of the largest size); the runtime archive only fxc_ ones."""
    exported = {}
    for name, (artifact, _, _) in named.items():
        symbols: dict[str, str] = {}
        for member in _archive_members(artifact / f"lib{name}.a"):
            symbols.update(_defined_globals(member))
        own = {s for s in symbols if s.startswith(f"{name}_")}
        assert {f"{name}_init", f"{name}_run", f"{name}_model_run", f"{name}_input_specs"} <= own
        assert any(s.startswith(f"{name}_weights_") for s in own), "the weights blob carries the name"
        shared = {s for s in symbols if s.startswith(("fxc_k_", "fxc_c_"))}
        assert shared and all(symbols[s] == "STB_WEAK" for s in shared)
        commons = {s for s in symbols if symbols[s] == "COMMON"}
        assert commons <= {"fxc_zero_rows"}
        assert set(symbols) - own - shared - commons <= {"fxc_parallel_for"}
        assert symbols.get("fxc_parallel_for", "STB_WEAK") == "STB_WEAK"
        exported[name] = own
        runtime = {}
        for member in _archive_members(artifact / "libfxc_runtime.a"):
            runtime.update(_defined_globals(member))
        assert "fxc_pool_ensure" in runtime and all(s.startswith("fxc_") for s in runtime)
    assert not exported["detector"] & exported["classifier"]


def _two_models_program(named, tmp_path: Path) -> tuple[Path, list[str]]:
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.emit.link import compile_c_program

    det, cls = named["detector"][0], named["classifier"][0]
    manifest = json.loads((det / "manifest.json").read_text())
    target = get_board(manifest["board"]).target
    exe = compile_c_program(target, manifest["cpu"], [C_DIR / "app_two_models.c"], [det, cls],
                            ["-std=c99", "-Wall", "-Wextra", "-Werror", det / "libdetector.a", cls / "libclassifier.a",
                             det / "libfxc_runtime.a", "-lpthread"], tmp_path / "two_models")
    return exe, [manifest["emulator"]] if manifest["emulator"] else []


def test_two_models_one_program_share_arena_runtime_and_pool(named, tmp_path):
    exe, emulator = _two_models_program(named, tmp_path)
    with open(exe, "rb") as fh:  # one copy of the runtime: its pool (a static) and its parallel-for once
        symbols = [s for s in ELFFile(fh).get_section_by_name(".symtab").iter_symbols()]
    assert sum(s.name == "pool" and s["st_info"]["type"] == "STT_OBJECT" for s in symbols) == 1
    assert sum(s.name == "fxc_parallel_for" and s["st_shndx"] != "SHN_UNDEF" for s in symbols) == 1
    paths = []
    for name in ("detector", "classifier"):
        _, _, feeds = named[name]
        path = tmp_path / f"{name}.in"
        path.write_bytes(np.ascontiguousarray(feeds["x"]).tobytes())
        paths.append(path)
    outs = [tmp_path / "detector.out", tmp_path / "classifier.out"]
    proc = subprocess.run(emulator + [str(exe), *map(str, paths + outs), "concurrent"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    arena, det_bytes, cls_bytes = map(int, lines[0].split()[1:])
    assert arena == max(det_bytes, cls_bytes) and det_bytes > 0 and cls_bytes > 0
    assert lines[1:] == ["threads 2 2", "rerun same", "concurrent mismatches 0"]
    for name, out in zip(("detector", "classifier"), outs):
        artifact, model, feeds = named[name]
        (want,) = reference(model, feeds).values()
        got = np.frombuffer(out.read_bytes(), np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_named_runners_run_profile_and_inspect(named, tmp_path):
    """The runner and runner_prof of a named build (runner.c compiled against its names) behind `run` and
    `profile`; inspect prints the name."""
    from fluidml_xc.run.execute import run_artifact

    artifact, model, feeds = named["classifier"]
    (want,) = reference(model, feeds).values()
    result = run_artifact(artifact, feeds, timeout=600)
    np.testing.assert_allclose(result.outputs["y"], want, rtol=1e-4, atol=1e-5)
    bench = run_artifact(artifact, feeds, bench=2, warmup=0, profile=True, timeout=600).bench
    assert [op["type"] for op in bench["ops"]] and bench["threads"] == 2
    artifact, model, feeds = named["detector"]
    (want,) = reference(model, feeds).values()
    np.testing.assert_allclose(run_artifact(artifact, feeds, timeout=600).outputs["y"], want, rtol=1e-4, atol=1e-5)


def test_inspect_shows_the_name(named, capsys):
    from fluidml_xc import cli

    artifact = named["detector"][0]
    assert cli.main(["inspect", str(artifact)]) == 0
    assert "C API: name detector, detector_* / DETECTOR_* in detector.h, libdetector.a + the shared runtime libfxc_runtime.a" \
        in capsys.readouterr().out
    assert cli.main(["inspect", str(artifact), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["c_api"]["name"] == "detector"


@pytest.mark.parametrize("name, reason", [("2fast", "not a C identifier"), ("int", "is a C keyword")])
def test_bad_name_refused_in_one_line_writing_nothing(name, reason, tmp_path):

    model, _ = detector()
    onnx.save(model, str(tmp_path / "m.onnx"))
    proc = cli("build", str(tmp_path / "m.onnx"), "--name", name, cwd=tmp_path)
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert reason in line and repr(name) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("name, reason", [("kws-v2", "not a C identifier"), ("détecteur", "not a C identifier"),
                                          ("static", "is a C keyword"), ("_Det", "reserved"), ("det__v2", "reserved"),
                                          ("det_", "reserved"), ("fxc_pool", "shared runtime"), ("FXC", "shared runtime"),
                                          ("d" * 65, "more than 64")])
def test_more_bad_names(name, reason, tmp_path, monkeypatch, capsys):
    from fluidml_xc import cli

    model, _ = detector()
    onnx.save(model, str(tmp_path / "m.onnx"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["build", "m.onnx", "--name", name]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("fluidml-xc: error: --name") and reason in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_deploy_and_verify_named_artifact_over_ssh(named, tmp_path, loopback_sshd):
    """deploy uploads the generic runner; verify runs it on the "board" (sshd on 127.0.0.1) against ONNX Runtime."""
    artifact = named["classifier"][0]
    if json.loads((artifact / "manifest.json").read_text())["board"] != "qemu-aarch64":
        pytest.skip("one board is enough for the ssh path")
    common = loopback_sshd.args() + ["--base-dir", str(tmp_path / "board")]
    proc = cli("deploy", str(artifact), *common)
    assert proc.returncode == 0, proc.stderr
    proc = cli("verify", str(artifact), *common)
    assert proc.returncode == 0, proc.stderr
    assert " ok" in proc.stdout
