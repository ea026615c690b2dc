"""Runtime, templates, link and execute: hand-made LLVM model objects linked and run for every target."""
from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from fluidml_xc import cli
from fluidml_xc.target.boards import Target, get_target
from fluidml_xc.errors import InputError, RunError, ToolchainError
from fluidml_xc.artifact import Manifest, read_manifest
from fluidml_xc.run.execute import check_feeds, emulator_command, load_feeds, random_feeds, run_artifact, save_npz
from fluidml_xc.emit.link import compile_c_program, is_host_target, link_artifact, runtime_objects
from fluidml_xc.emit.capi import ModelSpec, TensorSpec, c_string, render_sources
from modelrun import require_program

X_NAME, T_NAME, Y_NAME, Z_NAME = "gpu_0/data_0", 'tok"en\\', "y/out", "z?\"'"
OPS = [("mul_add/0", "Mul"), ('quote"op\\\t', "Add")]
AFFINE_SPEC = ModelSpec(
    name="affine", inputs=[TensorSpec(X_NAME, (2, 3), "float32"), TensorSpec(T_NAME, (3,), "int64")],
    outputs=[TensorSpec(Y_NAME, (2, 3), "float32"), TensorSpec(Z_NAME, (3,), "int64")],
    arena_bytes=24, arena_align=64, ops=OPS)

# y = x*2 (into the arena) + 1; z = t*3 + 1. PROF_n become profiling hook calls in model_prof.o.
AFFINE_IR = """
define void @fxc_model_run(ptr %inputs, ptr %outputs, ptr %arena) {
entry:
  %x = load ptr, ptr %inputs
  %t.slot = getelementptr ptr, ptr %inputs, i32 1
  %t = load ptr, ptr %t.slot
  %y = load ptr, ptr %outputs
  %z.slot = getelementptr ptr, ptr %outputs, i32 1
  %z = load ptr, ptr %z.slot
  PROF_ENTER_0
  br label %scale
scale:
  %i = phi i32 [0, %entry], [%i.next, %scale]
  %xp = getelementptr float, ptr %x, i32 %i
  %xv = load float, ptr %xp
  %twice = fmul float %xv, 2.0
  %ap = getelementptr float, ptr %arena, i32 %i
  store float %twice, ptr %ap
  %i.next = add i32 %i, 1
  %scale.done = icmp eq i32 %i.next, 6
  br i1 %scale.done, label %shift, label %scale
shift:
  %j = phi i32 [0, %scale], [%j.next, %shift]
  %ap2 = getelementptr float, ptr %arena, i32 %j
  %av = load float, ptr %ap2
  %yv = fadd float %av, 1.0
  %yp = getelementptr float, ptr %y, i32 %j
  store float %yv, ptr %yp
  %j.next = add i32 %j, 1
  %shift.done = icmp eq i32 %j.next, 6
  br i1 %shift.done, label %ints, label %shift
ints:
  PROF_EXIT_0
  PROF_ENTER_1
  br label %intloop
intloop:
  %k = phi i32 [0, %ints], [%k.next, %intloop]
  %tp = getelementptr i64, ptr %t, i32 %k
  %tv = load i64, ptr %tp
  %t3 = mul i64 %tv, 3
  %zv = add i64 %t3, 1
  %zp = getelementptr i64, ptr %z, i32 %k
  store i64 %zv, ptr %zp
  %k.next = add i32 %k, 1
  %int.done = icmp eq i32 %k.next, 3
  br i1 %int.done, label %done, label %intloop
done:
  PROF_EXIT_1
  ret void
}
"""

COPY_DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64", "bool"]
COPY_SHAPES = {"float64": (), "bool": (5,)}

TARGETS = {"x86_64": [], "aarch64": [pytest.mark.qemu], "armv7": [pytest.mark.qemu]}
ALL_TARGETS = [pytest.param(name, marks=marks) for name, marks in TARGETS.items()]
ELF_MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "armv7": "EM_ARM"}


def affine_ir() -> str:
    """fxc_model_run and fxc_model_run_profiled (the hooks arrive as function pointers) in one module."""
    plain, profiled = AFFINE_IR, AFFINE_IR.replace(
        "@fxc_model_run(ptr %inputs, ptr %outputs, ptr %arena)",
        "@fxc_model_run_profiled(ptr %inputs, ptr %outputs, ptr %arena, ptr %enter, ptr %exit)")
    for op in range(2):
        for hook in ("ENTER", "EXIT"):
            plain = plain.replace(f"PROF_{hook}_{op}", "")
            profiled = profiled.replace(f"PROF_{hook}_{op}", f"call void %{hook.lower()}(i32 {op})")
    return plain + profiled


def copy_spec() -> ModelSpec:
    shapes = {d: COPY_SHAPES.get(d, (2, 2)) for d in COPY_DTYPES}
    return ModelSpec(name="copy", inputs=[TensorSpec(f"in_{d}", shapes[d], d) for d in COPY_DTYPES],
                     outputs=[TensorSpec(f"out_{d}", shapes[d], d) for d in COPY_DTYPES], arena_bytes=0)


def copy_ir(spec: ModelSpec) -> str:
    lines = ["declare void @llvm.memcpy.p0.p0.i32(ptr, ptr, i32, i1)",
             "define void @fxc_model_run(ptr %inputs, ptr %outputs, ptr %arena) {", "entry:"]
    for i, tensor in enumerate(spec.inputs):
        lines += [f"  %is{i} = getelementptr ptr, ptr %inputs, i32 {i}", f"  %in{i} = load ptr, ptr %is{i}",
                  f"  %os{i} = getelementptr ptr, ptr %outputs, i32 {i}", f"  %out{i} = load ptr, ptr %os{i}",
                  f"  call void @llvm.memcpy.p0.p0.i32(ptr %out{i}, ptr %in{i}, i32 {tensor.nbytes}, i1 false)"]
    profiled = ["define void @fxc_model_run_profiled(ptr %inputs, ptr %outputs, ptr %arena, ptr %enter, ptr %exit) {",
                "entry:", "  call void @fxc_model_run(ptr %inputs, ptr %outputs, ptr %arena)", "  ret void", "}"]
    return "\n".join(lines + ["  ret void", "}"] + profiled)


def emit_object(target: Target, ir_text: str, out: Path) -> Path:
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    cpu, features = target.cpu, target.features
    if cpu == "native":
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    machine = llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=cpu, features=features, opt=2, reloc="pic", codemodel="default")
    module = llvm.parse_assembly(ir_text)
    module.triple = target.triple
    module.data_layout = str(machine.target_data)
    module.verify()
    out.write_bytes(machine.emit_object(module))
    return out


def make_artifact(target: Target, spec: ModelSpec, model_ir: str, out_dir: Path, profile: bool = True) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    header, glue = render_sources(spec, out_dir)
    model_o = emit_object(target, model_ir, out_dir / "model.o")
    result = link_artifact(target, model_o, model_o if profile else None, glue, out_dir, out_dir)
    assert result.runner.is_file() and result.library.is_file()
    tensors = lambda ts: [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in ts]  # noqa: E731
    manifest = {"format": 1, "model": {"name": spec.name}, "board": target.name, "target": target.name,
                "triple": target.triple, "cpu": target.cpu, "features": target.features, "emulator": target.emulator,
                "inputs": tensors(spec.inputs), "outputs": tensors(spec.outputs),
                "ops": [{"name": n, "type": t} for n, t in spec.ops],
                "memory": {"arena_bytes": spec.arena_bytes, "alignment": spec.arena_align}}
    (out_dir / "manifest.json").write_text(json.dumps(manifest))
    return out_dir


@pytest.fixture(scope="module", params=ALL_TARGETS)
def affine(request, tmp_path_factory) -> Path:
    target = get_target(request.param)
    if target.emulator:
        require_program(target.emulator)
    return make_artifact(target, AFFINE_SPEC, affine_ir(),
                         tmp_path_factory.mktemp(f"affine-{target.name}"))


@pytest.fixture(scope="module")
def affine_x86(tmp_path_factory) -> Path:
    return make_artifact(get_target("x86_64"), AFFINE_SPEC, affine_ir(),
                         tmp_path_factory.mktemp("affine-x86"))


def run_raw(artifact: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*emulator_command(read_manifest(artifact)), str(artifact / "runner"), *args],
                          capture_output=True, text=True, timeout=60)


def expected_affine(x: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
    return {Y_NAME: x * np.float32(2) + np.float32(1), Z_NAME: t * 3 + 1}


def test_c_string_escapes():
    assert c_string('a"b\\c') == '"a\\"b\\\\c"'
    assert c_string("??=") == '"\\?\\?="'
    assert c_string("é\n1") == '"\\303\\251\\0121"'


def test_header_keeps_odd_names(affine_x86):
    header = (affine_x86 / "model.h").read_text()
    glue = (affine_x86 / "model_glue.c").read_text()
    assert "#define FXC_ARENA_BYTES ((size_t)24u)" in header and "#define FXC_NUM_INPUTS 2" in header
    assert '"gpu_0/data_0"' in glue and '"tok\\"en\\\\"' in glue and '"z\\?\\"\'"' in glue
    assert '"quote\\"op\\\\\\011"' in glue


def test_outputs(affine):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    t = np.array([4, -7, 2**40], dtype=np.int64)
    result = run_artifact(affine, {X_NAME: x, T_NAME: t}, timeout=60)
    for name, want in expected_affine(x, t).items():
        np.testing.assert_array_equal(result.outputs[name], want)
        assert result.outputs[name].dtype == want.dtype
    assert result.bench is None


def test_random_fill_matches_numpy(affine):
    feeds = random_feeds(read_manifest(affine))
    x, t = feeds[X_NAME], feeds[T_NAME]
    assert x.dtype == np.float32 and np.all((x >= -1) & (x < 1)) and np.all((t >= 0) & (t < 10))
    result = run_artifact(affine, timeout=60)
    for name, want in expected_affine(x, t).items():
        np.testing.assert_array_equal(result.outputs[name], want)


def test_elf_header(affine):
    manifest = read_manifest(affine)
    for runner in ("runner", "runner_prof"):
        with open(affine / runner, "rb") as fh:
            elf = ELFFile(fh)
            assert elf["e_machine"] == ELF_MACHINES[manifest.target]
            assert elf["e_type"] == "ET_EXEC" and not elf.get_section_by_name(".interp")
            if manifest.target == "armv7":
                assert elf.elfclass == 32 and elf["e_flags"] & 0x400, "not hard-float EABI"
                assert elf["e_flags"] & 0xFF000000 == 0x05000000


def test_bench_and_profile(affine):
    result = run_artifact(affine, bench=3, warmup=1, profile=True, timeout=60)
    bench = result.bench
    keys = {"runs", "warmup", "median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "peak_rss_bytes",
            "arena_bytes", "ops", "threads", "cpu_ms", "cpu_over_wall", "rss_start_bytes", "rss_end_bytes", "fds_start",
            "fds_end"}
    assert set(bench) == keys and bench["runs"] == 3 and bench["warmup"] == 1 and bench["arena_bytes"] == 24
    assert bench["min_ms"] <= bench["median_ms"] <= bench["p90_ms"] <= bench["p99_ms"] <= bench["max_ms"]
    assert bench["peak_rss_bytes"] > 0 and bench["threads"] >= 1 and bench["cpu_ms"] >= 0
    assert 0 < bench["rss_start_bytes"] <= bench["peak_rss_bytes"] and bench["fds_start"] == bench["fds_end"] >= 3
    assert [(op["name"], op["type"]) for op in bench["ops"]] == OPS
    assert all(op["ms"] >= 0 for op in bench["ops"])


def test_plain_bench_has_no_ops(affine_x86):
    result = run_artifact(affine_x86, bench=2, warmup=0)
    assert "ops" not in result.bench and result.bench["runs"] == 2
    proc = run_raw(affine_x86, "--profile")
    assert proc.returncode == 2 and "runner_prof" in proc.stderr


def test_runner_rejects_mismatched_npy(affine_x86, tmp_path):
    np.save(tmp_path / "shape.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "dtype.npy", np.zeros((2, 3), np.float64))
    proc = run_raw(affine_x86, "-i", str(tmp_path / "shape.npy"))
    assert proc.returncode == 2
    assert "shape (3, 2) does not match (2, 3) expected for 'gpu_0/data_0'" in proc.stderr
    proc = run_raw(affine_x86, "-i", str(tmp_path / "dtype.npy"))
    assert proc.returncode == 2 and "dtype float64 does not match float32" in proc.stderr
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    proc = run_raw(affine_x86, "-i", str(tmp_path / "junk.npy"))
    assert proc.returncode == 2 and "bad magic" in proc.stderr
    for args in (["--bench", "0"], ["--bogus"], ["-o"], ["-i", "a", "-i", "b", "-i", "c"]):
        proc = run_raw(affine_x86, *args)
        assert proc.returncode == 2 and proc.stderr.strip(), args


def test_all_dtypes_and_npy_versions(tmp_path):
    spec = copy_spec()
    artifact = make_artifact(get_target("x86_64"), spec, copy_ir(spec), tmp_path / "copy", profile=False)
    manifest = read_manifest(artifact)
    feeds = random_feeds(manifest, seed=0)
    filled = run_artifact(artifact).outputs
    for tensor in spec.inputs:
        got = filled["out" + tensor.name[2:]]
        np.testing.assert_array_equal(got, feeds[tensor.name])
        assert got.dtype == np.dtype(tensor.dtype) and got.shape == tensor.shape
    assert random_feeds(manifest, seed=1)["in_float32"].tolist() != feeds["in_float32"].tolist()
    args = []
    for i, tensor in enumerate(spec.inputs):
        path = tmp_path / f"{tensor.name}.npy"
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, feeds[tensor.name] + np.ones((), tensor.dtype), version=((1, 0), (2, 0), (3, 0))[i % 3])
        args += ["-i", str(path)]
    outs = [tmp_path / f"o{i}.npy" for i in range(len(spec.outputs))]
    proc = run_raw(artifact, *args, *[a for o in outs for a in ("-o", str(o))])
    assert proc.returncode == 0, proc.stderr
    for tensor, out in zip(spec.inputs, outs):
        np.testing.assert_array_equal(np.load(out), feeds[tensor.name] + np.ones((), tensor.dtype))


@pytest.mark.qemu
def test_user_program_aarch64(tmp_path):
    target = get_target("aarch64")
    emulator = require_program(target.emulator)
    artifact = make_artifact(target, AFFINE_SPEC, affine_ir(), tmp_path / "art", profile=False)
    program = tmp_path / "app.c"
    program.write_text(r"""
#include <stdio.h>
#include "model.h"

static unsigned char arena[FXC_ARENA_BYTES + 1] __attribute__((aligned(FXC_ARENA_ALIGN)));

int main(void)
{
    float x[6] = {0.5f, -1.0f, 2.0f, 3.25f, 0.0f, -4.5f}, y[6];
    int64_t t[3] = {1, 2, 3}, z[3];
    const void *inputs[FXC_NUM_INPUTS] = {x, t};
    void *outputs[FXC_NUM_OUTPUTS] = {y, z};
    if (fxc_init(arena + 1, FXC_ARENA_BYTES) != FXC_ERR_ARENA_ALIGN || fxc_init(arena, 4) != FXC_ERR_ARENA_SIZE)
        return 1;
    if (fxc_init(arena, sizeof arena) != FXC_OK || fxc_run(arena, inputs, outputs) != FXC_OK)
        return 1;
    printf("%s %s %d\n", fxc_input_specs[0].name, fxc_output_specs[1].name, (int)fxc_output_specs[0].shape[1]);
    for (int i = 0; i < 6; i++)
        printf("%g ", y[i]);
    for (int i = 0; i < 3; i++)
        printf("%lld ", (long long)z[i]);
    printf("\n");
    return 0;
}
""")
    exe = compile_c_program(target, target.cpu, [program], [artifact], [artifact / "libmodel.a"], tmp_path / "app")
    with open(exe, "rb") as fh:
        assert ELFFile(fh)["e_machine"] == "EM_AARCH64"
    proc = subprocess.run([emulator, str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["gpu_0/data_0 z?\"' 3", "2 -1 5 7.5 1 -8 4 7 10 "]


def test_feed_validation(affine_x86):
    manifest = read_manifest(affine_x86)
    with pytest.raises(InputError, match=r"unknown 'x'.*missing 'gpu_0/data_0'.*expected names: 'gpu_0/data_0'"):
        check_feeds(manifest, {"x": np.zeros((2, 3), np.float32), T_NAME: np.zeros(3, np.int64)})
    with pytest.raises(InputError, match=r"shape \(3, 2\) does not match the model's \(2, 3\)"):
        check_feeds(manifest, {X_NAME: np.zeros((3, 2), np.float32), T_NAME: np.zeros(3, np.int64)})
    with pytest.raises(InputError, match="cannot be converted"):
        check_feeds(manifest, {X_NAME: np.zeros((2, 3), np.float32), T_NAME: np.full(3, 0.5)})
    cast = check_feeds(manifest, {X_NAME: np.ones((2, 3)), T_NAME: np.arange(3, dtype=np.int32)})
    assert cast[0].dtype == np.float32 and cast[1].dtype == np.int64


def test_runner_failures_are_reported(tmp_path):
    manifest = {"target": "x86_64", "emulator": "", "inputs": [], "outputs": []}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    runner = tmp_path / "runner"
    runner.write_text("#!/bin/sh\necho 'about to crash' >&2\nkill -SEGV $$\n")
    runner.chmod(0o755)
    with pytest.raises(RunError, match="runner was killed by signal SIGSEGV: about to crash"):
        run_artifact(tmp_path)
    runner.write_text("#!/bin/sh\necho 'first' >&2\necho 'runner: error: last words' >&2\nexit 2\n")
    with pytest.raises(RunError, match="runner failed with exit status 2: runner: error: last words"):
        run_artifact(tmp_path)
    runner.write_text("#!/bin/sh\nsleep 10\n")
    with pytest.raises(RunError, match="timed out after 0.2 s"):
        run_artifact(tmp_path, timeout=0.2)


@pytest.mark.skipif(is_host_target(get_target("aarch64")), reason="aarch64 runs natively here")
def test_missing_emulator_message(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"qemu-aarch64-static not found: install the Debian package "
                                             r"qemu-user-static \(apt-get install qemu-user-static\)"):
        emulator_command(Manifest(target="aarch64", emulator="qemu-aarch64-static", inputs=(), outputs=()))


def test_compiler_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return undefined_thing; }\n")
    with pytest.raises(ToolchainError) as info:
        compile_c_program(get_target("x86_64"), "native", [bad], [], [], tmp_path / "bad")
    message = str(info.value)
    assert "\n" not in message and "undefined_thing" in message and "error" in message


def test_zig_runs_without_a_python_start_up(monkeypatch, tmp_path):
    """Every zig call of a link is ziglang's own binary (no `python -m ziglang` start-up per call), and what it
    links runs."""
    import sys
    from fluidml_xc.emit import link

    calls: list[list[str]] = []
    real_run = subprocess.run

    def recording_run(cmd, *args, **kwargs):
        calls.append([str(c) for c in cmd])
        return real_run(cmd, *args, **kwargs)
    monkeypatch.setattr(link.subprocess, "run", recording_run)
    artifact = make_artifact(get_target("x86_64"), AFFINE_SPEC, affine_ir(), tmp_path / "affine")
    zig = str(link._ziglang_dir() / "zig")
    assert calls and all(call[0] == zig and sys.executable not in call for call in calls)
    x, t = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2, 3], dtype=np.int64)
    result = run_artifact(artifact, {X_NAME: x, T_NAME: t}, timeout=60)
    for name, want in expected_affine(x, t).items():
        np.testing.assert_array_equal(result.outputs[name], want)


def test_runtime_cache_is_shared_and_parallel_safe(monkeypatch, tmp_path):
    monkeypatch.setenv("FLUIDML_XC_CACHE", str(tmp_path))
    target = get_target("x86_64")
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(runtime_objects(target))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1]
    assert all(path.is_file() and tmp_path in path.parents for path in results[0].values())
    assert [p.name for p in (tmp_path / "runtime").iterdir()] == [results[0]["npy.c"].parent.name]


def test_run_command(affine_x86, tmp_path, monkeypatch, capsys):
    feeds = {X_NAME: np.arange(6, dtype=np.float32).reshape(2, 3), T_NAME: np.array([1, 2, 3])}
    save_npz(tmp_path / "feeds.npz", feeds)
    assert load_feeds(tmp_path / "feeds.npz").keys() == feeds.keys()
    out = tmp_path / "out.npz"
    assert cli.main(["run", str(affine_x86), "--inputs", str(tmp_path / "feeds.npz"), "--outputs", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "y/out: shape [2, 3] float32 [1, 3, 5, 7, 9, 11]" in printed
    with np.load(out) as saved:
        assert sorted(saved.files) == sorted([Y_NAME, Z_NAME])
        np.testing.assert_array_equal(saved[Z_NAME], [4, 7, 10])
    assert cli.main(["run", str(affine_x86), "--outputs", str(out)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    np.save(tmp_path / "x.npy", feeds[X_NAME])
    np.save(tmp_path / "t.npy", feeds[T_NAME])
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--bench", "2"]) == 2
    assert "no build found" in capsys.readouterr().err
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / ".last").write_text(f"{affine_x86}\n")
    args = ["run", "--input", f"{X_NAME}=x.npy", "--input", f"{T_NAME}=t.npy", "--outputs", "out.npz", "--force"]
    assert cli.main([*args, "--bench", "2", "--warmup", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 2
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved[Y_NAME], feeds[X_NAME] * 2 + 1)
    assert cli.main(["run", "--input", "nonsense"]) == 2
    assert "expected NAME=FILE.npy" in capsys.readouterr().err


@pytest.mark.parametrize("target_name", ["x86_64", "aarch64"])
def test_weights_blob_and_labels(tmp_path, target_name):
    """attach_weights: the object's weights section holds the blob byte for byte, each label a hidden weak symbol at
    its offset (labels at 0, shared offsets, out of order, at the end)."""
    from fluidml_xc.emit.link import attach_weights

    weights = np.random.default_rng(3).integers(0, 256, 70_001, dtype=np.uint8).tobytes()
    labels = [("fxc_c_mid", 4096), ("fxc_c_first", 0), ("fxc_c_same", 4096), ("fxc_c_late", 69_000),
              ("fxc_c_end", 70_001)]
    out = attach_weights(get_target(target_name), [], weights, "fxc_weights_test", tmp_path / "model.o", labels=labels)
    assert [p.name for p in tmp_path.iterdir()] == ["model.o"]
    with open(out, "rb") as f:
        elf = ELFFile(f)
        section = elf.get_section_by_name(".rodata.fxc_weights_test")
        assert section.data() == weights
        symbols = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
        for name, offset in labels:
            sym = symbols[name]
            assert (sym["st_value"], sym["st_info"]["bind"], sym["st_other"]["visibility"]) == (
                offset, "STB_WEAK", "STV_HIDDEN")
        assert symbols["fxc_weights_test"]["st_value"] == 0
    with pytest.raises(ValueError, match="outside the 70001-byte blob"):
        attach_weights(get_target(target_name), [], weights, "fxc_weights_test", tmp_path / "bad.o",
                       labels=[("fxc_c_past", 70_002)])
    assert [p.name for p in tmp_path.iterdir()] == ["model.o"]  # nothing half-written
