"""CPU targeting (#23): the x86_64 board's code variants (x86-64-v2/v3/v4 chosen at init), --cpu/--features,
the runner's and the C API's refusal of a CPU without the code's extensions, deploy's and `boards detect`'s
reading of /proc/cpuinfo, board files by path and in a user directory, no LLVM warning on any board, and the
one-time runtime build per architecture."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.errors import InputError
from fluidml_xc.target.boards import boards, get_board
from modelrun import cli, require_program, run
from sshd import ssh_args, start_server

ROOT = Path(__file__).resolve().parent.parent


def cnn_model() -> onnx.ModelProto:
    """Conv (3x3, 16 channels) + Relu + Gemm + Sigmoid: blocked conv, matmul and elementwise kernels."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    fc = numpy_helper.from_array(rng.standard_normal((16 * 12 * 12, 24)).astype(np.float32) * 0.05, "fc")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24])], [w, b, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def tiny_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def build(tmp: Path, model: onnx.ModelProto, name: str, **options) -> Path:
    path = tmp / f"{name}.onnx"
    onnx.save(model, str(path))
    return build_model(path, BuildOptions(out_dir=tmp / name, record_last=False, **options)).artifact


def run_runner(artifact: Path, x: np.ndarray, tmp: Path, prefix: list[str], env: dict | None = None):
    import os
    np.save(tmp / "x.npy", x)
    out = tmp / f"y-{len(list(tmp.glob('y-*.npy')))}.npy"
    proc = subprocess.run([*prefix, str(artifact / "runner"), "-i", str(tmp / "x.npy"), "-o", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    return proc, (np.load(out) if proc.returncode == 0 else None)


# ---------------------------------------------------------------- --cpu / --features and LLVM's spelling

def test_unknown_cpu_or_feature_is_a_one_line_error(tmp_path):
    onnx.save(tiny_model(), str(tmp_path / "m.onnx"))
    for args, words in ((["--cpu", "pentium9"], ["unknown CPU 'pentium9'", "x86-64-v3"]),
                        (["--features", "+avx9000"], ["unknown CPU feature '+avx9000'"]),
                        (["--board", "rpi5", "--features", "+fp16"], ["unknown CPU feature '+fp16'", "fullfp16"])):
        proc = cli("build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"), *args)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert all(word in lines[0] for word in words), lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("board", sorted(boards()))
def test_no_board_build_prints_an_llvm_warning(board, tmp_path, capfd):
    """A real build per board with stderr captured at the file descriptor (LLVM writes there directly):
    rpi5 and jetson-orin-nano listed +fp16, which LLVM ignored with a warning three times per build."""
    artifact = build(tmp_path, tiny_model(), board, board=board, profile_runner=False)
    err = capfd.readouterr().err
    assert "warning" not in err.lower() and "not a recognized" not in err, err
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["cpu_needs"] or manifest["target"] != "x86_64"


# ---------------------------------------------------------------- variants, refusal, qemu

def test_default_build_runs_on_nehalem_and_haswell_build_refuses_it(tmp_path):
    """The default x86_64 build runs under qemu's Nehalem (x86-64-v2: no AVX) with the outputs of the native run
    (which takes the widest variant this CPU has); a --cpu haswell build refuses it with one line, exit 4."""
    qemu = require_program("qemu-x86_64-static")
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    default = build(tmp_path, cnn_model(), "default", board="x86_64")
    manifest = json.loads((default / "manifest.json").read_text())
    assert manifest["cpu"] == "x86-64-v2" and manifest["cpu_variants"] == ["x86-64-v4", "x86-64-v3", "x86-64-v2"]
    _, native = run_runner(default, x, tmp_path, [])
    proc, nehalem = run_runner(default, x, tmp_path, [qemu, "-cpu", "Nehalem"])
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(nehalem, native, rtol=1e-5, atol=1e-6)
    for level in ("x86-64-v2", "x86-64-v3"):  # each variant natively, capped by FXC_CPU_VARIANT
        _, capped = run_runner(default, x, tmp_path, [], {"FXC_CPU_VARIANT": level})
        np.testing.assert_allclose(capped, native, rtol=1e-5, atol=1e-6)
    haswell = build(tmp_path, cnn_model(), "haswell", board="x86_64", cpu="haswell")
    proc, _ = run_runner(haswell, x, tmp_path, [qemu, "-cpu", "Nehalem"])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("runner")]
    assert proc.returncode == 4 and len(lines) == 1, proc.stderr
    assert re.search(r"runner: error: this CPU lacks avx, .*avx2.* of cpu haswell", lines[0]), lines[0]
    assert "--board x86_64" in lines[0]


APP = r'''
#include <stdio.h>
#include "model.h"
static unsigned char arena[FXC_ARENA_BYTES + 1] __attribute__((aligned(FXC_ARENA_ALIGN)));
int main(void) {
    int rc = fxc_init(arena, sizeof arena);
    printf("%d %s\n", rc, rc == FXC_ERR_CPU ? fxc_strerror(rc) : "-");
    return 0;
}
'''


def test_c_api_init_returns_err_cpu(tmp_path):
    from fluidml_xc.emit.link import compile_c_program

    qemu = require_program("qemu-x86_64-static")
    artifact = build(tmp_path, tiny_model(), "v3", board="x86_64-v3", profile_runner=False)
    (tmp_path / "app.c").write_text(APP)
    exe = compile_c_program(get_board("x86_64").target, "", [tmp_path / "app.c"], [artifact], [artifact / "libmodel.a"],
                            tmp_path / "app")
    out = subprocess.run([qemu, "-cpu", "Nehalem", str(exe)], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("-5 this CPU lacks avx") and "avx2" in out and "x86-64-v3" in out, out
    out = subprocess.run([qemu, "-cpu", "Haswell", str(exe)], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("0 -"), out


def test_v4_variant_uses_avx512_and_lower_ones_do_not(tmp_path):
    """qemu cannot run AVX-512: the v4 code is checked in the object instead, function by function."""
    objdump = shutil.which("llvm-objdump")
    assert objdump, "llvm-objdump is needed (Debian package llvm)"
    artifact = build(tmp_path, cnn_model(), "variants", board="x86_64", profile_runner=False)
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(artifact / "model.o")], capture_output=True,
                          text=True, check=True).stdout
    registers: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        label = re.match(r"[0-9a-f]+ <(.+)>:", line)
        if label:
            current = re.search(r"_x86_64_(v[234])", label.group(1))
            current = current.group(1) if current else None
        elif current:
            registers.setdefault(current, set()).update(re.findall(r"%([xyz])mm", line))
    assert "z" in registers["v4"]
    assert "y" in registers["v3"] and "z" not in registers["v3"]
    assert registers["v2"] <= {"x"}


def shared_weights_model() -> onnx.ModelProto:
    """Convs whose channel blocks differ per level (40 channels: 32-channel blocks at v4, 16 at v3, 8 at v2, the
    last partial; a 1x1 of 24: 16 at v4/v3, 8 at v2) and MatMuls whose panels do (64 columns at v4, 32, 16; a
    partial panel after 64)."""
    rng = np.random.default_rng(7)
    const = lambda name, *s: numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), name)  # noqa: E731
    inits = [const("w1", 40, 8, 3, 3), const("b1", 40), const("w2", 24, 40, 1, 1), const("fc1", 24 * 144, 72),
             const("fc2", 72, 64)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]), helper.make_node("Flatten", ["c2"], ["f"]),
             helper.make_node("MatMul", ["f", "fc1"], ["m1"]), helper.make_node("Relu", ["m1"], ["r2"]),
             helper.make_node("MatMul", ["r2", "fc2"], ["y"])]
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def weights_blob_bytes(artifact: Path) -> int:
    from elftools.elf.elffile import ELFFile

    with open(artifact / "model.o", "rb") as fh:
        return sum(s["sh_size"] for s in ELFFile(fh).iter_sections() if s.name.startswith(".rodata.fxc_weights_"))


def test_variants_share_one_copy_of_the_packed_weights(tmp_path):
    """Conv blocks and MatMul panels are packed once for all the variants (MachineSpec.pack_vector_bits): the
    default build's weights take no more than a single x86-64-v4 build's, and each variant's outputs match
    ONNX Runtime (v2 and v3 capped by FXC_CPU_VARIANT; v4 where this CPU has it)."""
    import onnxruntime as ort

    model = shared_weights_model()
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # direct convs: Winograd's transformed weights are chosen per variant by its cost model (docs/WINOGRAD.md)
    default = build(tmp_path, model, "default", board="x86_64", profile_runner=False, conv_algo="direct")
    single = build(tmp_path, model, "v4", board="x86_64", cpu="x86-64-v4", profile_runner=False, conv_algo="direct")
    assert 0 < weights_blob_bytes(default) <= weights_blob_bytes(single)
    for level in (None, "x86-64-v3", "x86-64-v2"):
        proc, y = run_runner(default, x, tmp_path, [], {"FXC_CPU_VARIANT": level} if level else None)
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_variants_compile_on_processes_into_the_same_objects(monkeypatch):
    """compile_modules on two child processes returns, in order, the objects compile_module makes here; IR LLVM
    rejects raises compile_module's own error; one core, one worker (compiled in this process)."""
    from fluidml_xc.target import objects
    from fluidml_xc.target.machine import compile_module, machine_specs

    ir_text = "define float @f(float %a, float %b) {\n  %c = fmul float %a, %b\n  ret float %c\n}\n"
    jobs = [(ir_text.replace("@f", f"@f{k}"), spec) for k, spec in enumerate(machine_specs(get_board("x86_64")))]
    here = [compile_module(ir, spec) for ir, spec in jobs]
    assert objects.compile_modules(jobs, workers=2) == here and len(set(here)) == len(jobs)
    with pytest.raises(RuntimeError, match="expected"):
        objects.compile_modules([*jobs, ("define nonsense", jobs[0][1])], workers=2)
    monkeypatch.setattr(objects, "_child_compile", lambda jobs: pytest.fail("small IR started a child"))
    assert objects.compile_modules(jobs) == here  # below PARALLEL_IR_CHARS: compiled in this process
    monkeypatch.setattr(objects.os, "sched_getaffinity", lambda pid: {0})
    assert objects.build_workers(3) == 1


# ---------------------------------------------------------------- boards: files by path, user directory

MY_BOARD = '''name = "my-a55"
description = "a Cortex-A55 box"
target = "aarch64"
cpu = "cortex-a55"
features = "+neon,+dotprod"
cores = 4
aliases = ["a55box"]
[ssh]
user = "edge"
'''


def test_board_file_by_path_and_in_the_user_directory(tmp_path, monkeypatch):
    from fluidml_xc.remote.artifact import load_artifact

    path = tmp_path / "myboard.toml"
    path.write_text(MY_BOARD)
    artifact = build(tmp_path, tiny_model(), "mine", board=str(path))
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["board"] == str(path.resolve()) and manifest["cpu"] == "cortex-a55"
    assert "dotprod" in manifest["cpu_needs"]
    loaded = load_artifact(artifact)
    assert (loaded.board.name, loaded.board.ssh_user) == ("my-a55", "edge")
    x = np.arange(16, dtype=np.float32).reshape(2, 8) / 8
    np.testing.assert_allclose(run(artifact, {"x": x})["y"], np.maximum(x @ np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), 0),
                               rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("FLUIDML_XC_BOARDS", str(tmp_path))
    assert get_board("a55box").cpu == "cortex-a55" and "my-a55" in boards()
    listing = cli("boards", env={"FLUIDML_XC_BOARDS": str(tmp_path)}).stdout
    assert "my-a55" in listing and "x86_64-v3" in listing
    (tmp_path / "bad.toml").write_text('name = "bad"\ntarget = "aarch64"\ncpus = "x"\n')
    with pytest.raises(InputError, match=r"bad.toml: unknown key 'cpus'"):
        get_board(str(tmp_path / "bad.toml"))


# ---------------------------------------------------------------- detect and deploy read /proc/cpuinfo

def x86_probe(flags: str) -> str:
    return (f"@uname\nLinux 6.1.0 x86_64\n@long_bit\n64\n@model\n\n@tegra\n@meminfo\nMemTotal: 8000000 kB\n@cpuinfo\n"
            f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n@base\n1048576\n@current\ntiny-x86_64-0123\n")


V2 = "fpu sse sse2 pni ssse3 cx16 sse4_1 sse4_2 popcnt"
V3 = V2 + " avx fma f16c movbe avx2 bmi1 bmi2 abm"
V4 = V3 + " avx512f avx512dq avx512cd avx512bw avx512vl"


def test_detect_recommends_the_x86_level_the_cpu_has():
    from fluidml_xc.remote.detect import describe, match_boards, parse_probe

    for flags, level in ((V2, "x86-64-v2"), (V3, "x86-64-v3"), (V4, "x86-64-v4")):
        info = parse_probe(x86_probe(flags))
        matches = match_boards(info)
        assert matches[0].name == "x86_64" and matches[1].cpu == level
        text = describe("box", info, matches, "/home/u/.fluidml-xc")
        assert f"level     {level}: --board x86_64 runs its {level} code here" in text
        assert "base dir  /home/u/.fluidml-xc: 1.0 GB free; deployed: tiny-x86_64-0123" in text
    atom = parse_probe(x86_probe("fpu sse sse2 pni ssse3 cx16"))
    text = describe("old", atom, match_boards(atom))
    assert match_boards(atom) == [] and "board     none fits" in text and "lacks sse4.1, sse4.2, popcnt" in text


def test_detect_leaves_out_an_arm_board_whose_cpu_lacks_its_extensions():
    from fluidml_xc.remote.detect import match_boards, parse_probe

    probe = ("@uname\nLinux 6.6 aarch64\n@long_bit\n64\n@model\nRaspberry Pi 5 Model B\n@tegra\n@meminfo\n@cpuinfo\n"
             "processor\t: 0\nFeatures\t: fp asimd evtstrm crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n")
    assert [b.name for b in match_boards(parse_probe(probe))] == ["rpi5"]
    assert match_boards(parse_probe(probe.replace(" asimddp", ""))) == []


# ---------------------------------------------------------------- over SSH (this machine as the board)

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("sshd"))
    yield srv
    srv.stop()


def host_flags() -> frozenset[str]:
    from fluidml_xc.target.cpus import cpuinfo_flags
    return cpuinfo_flags(Path("/proc/cpuinfo").read_text())


@pytest.mark.ssh
@pytest.mark.skipif(sys.platform != "linux" or "x86" not in __import__("platform").machine().lower(), reason="x86_64 host")
def test_deploy_refuses_a_board_without_the_artifacts_extensions(server, tmp_path):
    """A CPU this host lacks (znver3's sse4a on Intel, sapphirerapids' avx512fp16 on AMD): one line, exit 5, and
    nothing uploaded."""
    cpu, lacking = ("sapphirerapids", "avx512fp16") if "sse4a" in host_flags() else ("znver3", "sse4a")
    artifact = build(tmp_path, tiny_model(), "foreign", board="x86_64", cpu=cpu, profile_runner=False)
    base = tmp_path / "remote base"
    proc = cli("deploy", str(artifact), *ssh_args(server, None), "--base-dir", str(base))
    lines = [line for line in proc.stderr.splitlines() if line.startswith("fluidml-xc: error")]
    assert proc.returncode == 5 and len(lines) == 1, proc.stderr
    assert "lacks " in lines[0] and lacking in lines[0].split("lacks ", 1)[1] and "nothing uploaded" in lines[0]
    assert not base.exists() or [p.name for p in base.iterdir()] == []
    fits = build(tmp_path, tiny_model(), "fits", board="x86_64", profile_runner=False)
    assert cli("deploy", str(fits), *ssh_args(server, None), "--base-dir", str(base)).returncode == 0


@pytest.mark.ssh
def test_boards_detect_takes_base_dir_and_names_the_level(server, tmp_path):
    from fluidml_xc.target.cpus import X86_LEVELS, missing_on, required_features

    base = tmp_path / "deploys"
    proc = cli("boards", "detect", *ssh_args(server, None), "--base-dir", str(base))
    assert proc.returncode == 0, proc.stderr
    assert "board     x86_64 (boards/x86_64.toml)" in proc.stdout
    level = [name for name in X86_LEVELS if not missing_on(required_features("x86_64", "x86_64-linux-musl", name),
                                                           host_flags(), "x86_64")][-1]
    assert f"level     {level}: --board x86_64 runs its {level} code here" in proc.stdout
    assert f"base dir  {base}: " in proc.stdout and "deployed: nothing" in proc.stdout
    assert not base.exists()


# ---------------------------------------------------------------- the runtime, once per architecture

def test_runtime_is_built_once_per_architecture_with_a_notice(tmp_path, monkeypatch, capfd):
    """rpi4 (cortex-a72) and rpi5 (cortex-a76) share one runtime cache entry: only model.o is compiled per CPU."""
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path / "cache"))
    build(tmp_path, tiny_model(), "pi4", board="rpi4", profile_runner=False)
    first = capfd.readouterr().err
    assert "fluidml-xc: building the runtime for aarch64 once" in first and str(tmp_path / "cache" / "runtime") in first
    build(tmp_path, tiny_model(), "pi5", board="rpi5", profile_runner=False)
    assert "building the runtime" not in capfd.readouterr().err
    assert [p.name.split("-")[0] for p in (tmp_path / "cache" / "runtime").iterdir()] == ["aarch64"]
