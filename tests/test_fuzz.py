"""Issue 11: seeded, bounded fuzzing of `build` (mutated models), `run` (mutated feeds) and the runner's .npy
reader (also built with AddressSanitizer + UndefinedBehaviorSanitizer). Every case must end in exit 0 with
outputs matching ONNX Runtime / onnx.reference (where one of them accepts the model), or exit 2 with exactly
one error line; never a traceback, a signal or a hang; no file outside -o, nothing half-written.

Default: a few hundred cases (FUZZ_* below). A long run: `pytest tests/test_fuzz.py --fuzz-cases 3000 [--fuzz-seed S]`;
the counts are printed (-s) and summarized in docs/GUARANTEES.md."""
from __future__ import annotations

import collections
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from fuzzing import (Worker, base_models, dynamic_base_models, dynamic_edge_feeds, mutate_model, mutate_npy, mutate_npz,
                     npy_bytes, one_error_line, oracle, our_temporaries)

FUZZ_MODELS = 240
FUZZ_FEEDS = 120
FUZZ_NPY = 300
FUZZ_DYNAMIC = 24
"""Random .npy mutations of in-range feeds, split over the dynamic models (beside their fixed edge cases)."""
SEED = 11


def _cases(request, default: int) -> int:
    given = request.config.getoption("--fuzz-cases")
    return int(given) if given else default


def _seed(request) -> int:
    given = request.config.getoption("--fuzz-seed")
    return int(given) if given else SEED


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind == "f" or got.dtype.kind == "f":
        return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-4, equal_nan=True))
    return bool(np.array_equal(got, want))


def _report(name: str, counts: collections.Counter, failures: list[str]) -> None:
    print(f"\n{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert not failures, f"{len(failures)} failing cases:\n" + "\n".join(failures[:20])


def test_fuzz_build(request, tmp_path):
    from fluidml_xc.artifact import read_manifest
    from fluidml_xc.run.execute import random_feeds, run_artifact

    n = _cases(request, FUZZ_MODELS)
    rng = random.Random(_seed(request))
    bases = base_models()
    worker = Worker()
    counts: collections.Counter = collections.Counter()
    failures: list[str] = []
    try:
        for i in range(n):
            data, what = mutate_model(bases[i % len(bases)], rng)
            case = tmp_path / f"c{i}"
            case.mkdir()
            (case / "m.onnx").write_bytes(data)
            result = worker.run(case, "build", "m.onnx", "-o", "out", "--no-profile-runner", "--max-memory", "256M")
            tag = f"case {i} ({what})"
            leftovers = our_temporaries(result.pid)
            listing = sorted(p.name for p in case.iterdir())
            if leftovers:
                failures.append(f"{tag}: temporaries left: {leftovers}")
                for path in leftovers:
                    shutil.rmtree(path, ignore_errors=True)
            if result.code == 2:
                if one_error_line(result.stderr) is None:
                    failures.append(f"{tag}: exit 2 without exactly one error line: {result.stderr[-500:]!r}")
                elif listing != ["m.onnx"]:
                    failures.append(f"{tag}: refused but left {listing}")
                counts["refused (exit 2)"] += 1
            elif result.code == 0:
                if listing != ["build", "m.onnx", "out"] or sorted(p.name for p in (case / "build").iterdir()) != [".last"]:
                    failures.append(f"{tag}: files outside -o: {listing}")
                manifest = read_manifest(case / "out")
                feeds = random_feeds(manifest, seed=i)
                want = oracle(data, feeds)
                if want is None:
                    counts["built, no oracle accepts it"] += 1
                    continue
                got = run_artifact(case / "out", feeds, timeout=120).outputs
                names = [o.name for o in manifest.outputs]
                if len(want) != len(names) or not all(_close(got[nm], w) for nm, w in zip(names, want)):
                    failures.append(f"{tag}: outputs differ from the oracle")
                counts["built, outputs match the oracle"] += 1
            else:
                failures.append(f"{tag}: exit {result.code}: {result.stderr[-800:]!r}")
                counts[f"exit {result.code}"] += 1
            shutil.rmtree(case, ignore_errors=True)
    finally:
        worker.close()
    _report(f"build fuzz, {n} cases", counts, failures)


@pytest.fixture(scope="module")
def add_relu_artifact(tmp_path_factory):
    from fluidml_xc.build import BuildOptions, build_model

    work = tmp_path_factory.mktemp("fuzzart")
    model = base_models()[0]
    (work / "m.onnx").write_bytes(model.SerializeToString())
    art = build_model(work / "m.onnx", BuildOptions(out_dir=work / "art", record_last=False, profile_runner=False)).artifact
    bias = np.frombuffer(model.graph.initializer[0].raw_data, np.float32)
    return art, bias


def _expected(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return np.maximum(x.astype(np.float32) + bias, 0)


def test_fuzz_run_inputs(request, tmp_path, add_relu_artifact):
    from fluidml_xc.npyio import load_npz

    art, bias = add_relu_artifact
    n = _cases(request, FUZZ_FEEDS)
    rng = random.Random(_seed(request) + 1)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    worker = Worker()
    counts: collections.Counter = collections.Counter()
    failures: list[str] = []
    try:
        for i in range(n):
            data, what = mutate_npz({"x.npy": npy_bytes(x)}, rng)
            case = tmp_path / f"r{i}"
            case.mkdir()
            (case / "in.npz").write_bytes(data)
            result = worker.run(case, "run", str(art), "--inputs", "in.npz", "--outputs", "out.npz", "--timeout", "60")
            tag = f"case {i} ({what})"
            listing = sorted(p.name for p in case.iterdir())
            if result.code == 0:
                feeds = load_npz(case / "in.npz")
                got = load_npz(case / "out.npz")["y"]
                if listing != ["in.npz", "out.npz"] or not _close(got, _expected(feeds["x"], bias)):
                    failures.append(f"{tag}: accepted, but {listing} / outputs differ")
                counts["ran, outputs match"] += 1
            elif result.code == 2 and one_error_line(result.stderr) is not None:
                if listing != ["in.npz"]:
                    failures.append(f"{tag}: refused but left {listing}")
                counts["refused (exit 2)"] += 1
            else:
                failures.append(f"{tag}: exit {result.code}: {result.stderr[-800:]!r}")
            if our_temporaries(result.pid):
                failures.append(f"{tag}: temporaries left")
    finally:
        worker.close()
    _report(f"run-inputs fuzz, {n} cases", counts, failures)


def _npy_cases(n: int, tmp_path: Path, seed: int = SEED) -> list[tuple[Path, str]]:
    rng = random.Random(seed + 2)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    bases = [npy_bytes(x), npy_bytes(np.asfortranarray(x)), npy_bytes(x.astype(np.float64))]
    cases = []
    for i in range(n):
        data, what = mutate_npy(bases[i % len(bases)], rng)
        path = tmp_path / f"n{i}.npy"
        path.write_bytes(data)
        cases.append((path, what))
    return cases


def _runner_verdict(proc: subprocess.CompletedProcess, path: Path, out: Path, bias: np.ndarray, prefix: str) -> str | None:
    """None when the runner's handling of the input file is right, else what is wrong."""
    if proc.returncode == 0:
        try:
            x = np.load(path, allow_pickle=False)
        except Exception:
            return "accepted a file numpy cannot read"
        if x.shape != (2, 4) or x.dtype != np.float32:
            return f"accepted shape {x.shape} {x.dtype}"
        return None if _close(np.load(out), _expected(x, bias)) else "wrong outputs"
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    if not proc.stderr.isascii() or any(not c.isprintable() for c in proc.stderr.strip()):
        return f"raw bytes in the message: {proc.stderr[-300:]!r}"
    if proc.returncode != 2 or len(lines) != 1 or not lines[0].startswith(prefix):
        return f"exit {proc.returncode}: {proc.stderr[-500:]!r}"
    if out.exists():
        return "refused but wrote its output"
    return None


def test_fuzz_runner_npy_reader(request, tmp_path, add_relu_artifact):
    art, bias = add_relu_artifact
    n = _cases(request, FUZZ_NPY)
    counts: collections.Counter = collections.Counter()
    failures = []
    for path, what in _npy_cases(n, tmp_path, _seed(request)):
        out = path.with_suffix(".out.npy")
        proc = subprocess.run([str(art / "runner"), "-i", str(path), "-o", str(out)], capture_output=True, text=True,
                              errors="replace", timeout=60)
        verdict = _runner_verdict(proc, path, out, bias, "runner: error: ")
        counts["accepted" if proc.returncode == 0 else "refused"] += 1
        if verdict:
            failures.append(f"{path.name} ({what}): {verdict}")
        out.unlink(missing_ok=True)
    _report(f"runner .npy fuzz, {n} cases", counts, failures)


# ------------------------------------------------------------------------- AddressSanitizer + UBSan

SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
_OOB = ("#include <stdlib.h>\nint main(int c, char **v) { (void)v; volatile int *p = malloc(8); p[c + 3] = 1; "
        "int r = p[c + 3]; free((void *)p); return r - 1; }\n")


def sanitizer_compiler(tmp_path: Path) -> list[str] | None:
    """zig cc for x86_64-linux-gnu when its AddressSanitizer works (a heap overflow must be reported), else this
    machine's cc (gcc with libasan), else None."""
    probe = tmp_path / "oob.c"
    probe.write_text(_OOB)
    candidates = [[sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu"]]
    if shutil.which("cc"):
        candidates.append(["cc"])
    for cc in candidates:
        exe = tmp_path / "oob"
        build = subprocess.run([*cc, "-fsanitize=address", "-g", "-O1", str(probe), "-o", str(exe)], capture_output=True,
                               text=True, timeout=300)
        if build.returncode != 0:
            continue
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
        if "AddressSanitizer" in run.stderr:
            return cc
    return None


def sanitized_runner(art: Path, tmp_path: Path, cc: list[str] | None = None, extra: tuple[str, ...] = ()) -> Path:
    """The artifact's runner rebuilt with AddressSanitizer + UBSan (runner, runtime, glue and model.o) by `cc`
    (default: sanitizer_cc); `extra`: more sources and flags (the image decoder's, tests/test_image_decoder.py)."""
    from fluidml_xc.emit.link import LIBRARY_SOURCES
    from fluidml_xc.resources import data_dir

    cc = cc or sanitizer_cc(tmp_path)
    src = data_dir("runtime_c")
    runner = tmp_path / f"runner_asan_{art.name}"
    subprocess.run([*cc, *SANITIZE, "-std=c99", f"-I{src}", f"-I{art}", str(src / "runner.c"), str(src / "noprof.c"),
                    *[str(src / n) for n in LIBRARY_SOURCES], str(art / "model_glue.c"), str(art / "model.o"), *extra, "-lm",
                    "-lpthread", "-o", str(runner)], check=True, capture_output=True, timeout=300)
    return runner


def sanitizer_cc(tmp_path: Path) -> list[str]:
    """sanitizer_compiler's choice; skips off x86_64, fails when no compiler here builds ASan programs."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("sanitizer builds run on x86_64 hosts")
    cc = sanitizer_compiler(tmp_path)
    if cc is None:
        pytest.fail("no compiler here builds working AddressSanitizer programs (zig cc lacks the ASan runtime; "
                    "apt-get install gcc libasan8)")
    return cc


def _sanitizer_report(stderr: str) -> bool:
    return "Sanitizer" in stderr or "runtime error" in stderr


def test_npy_reader_and_runner_under_asan_and_ubsan(request, tmp_path, add_relu_artifact):
    """The reader's fuzz cases through npy.c and through a whole runner, both built with ASan + UBSan."""
    from fluidml_xc.resources import data_dir

    cc = sanitizer_cc(tmp_path)
    art, bias = add_relu_artifact
    src = data_dir("runtime_c")
    driver = tmp_path / "drv.c"
    driver.write_text(
        '#include <stdio.h>\n#include "fxc_runtime.h"\n'
        "int main(int argc, char **argv) {\n"
        "    static const int64_t shape[2] = {2, 4};\n"
        '    fxc_tensor_spec spec = {"x", 1, 2, shape, 32};\n'
        "    float buffer[8]; char err[1024]; int refused = 0;\n"
        "    for (int i = 1; i < argc; i++) refused += fxc_npy_read(argv[i], &spec, buffer, err, sizeof err) != 0;\n"
        '    printf("%d %d\\n", argc - 1, refused);\n    return 0;\n}\n')
    reader = tmp_path / "reader"
    subprocess.run([*cc, *SANITIZE, "-std=c99", f"-I{src}", str(driver), str(src / "npy.c"), "-o", str(reader)],
                   check=True, capture_output=True, timeout=300)
    runner = sanitized_runner(art, tmp_path, cc)
    cases = _npy_cases(_cases(request, FUZZ_NPY), tmp_path, _seed(request))
    proc = subprocess.run([str(reader), *[str(p) for p, _ in cases]], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and not _sanitizer_report(proc.stderr), proc.stderr[-3000:]
    total, refused = map(int, proc.stdout.split())
    assert total == len(cases) and 0 < refused < total
    failures = []
    for path, what in cases:
        out = path.with_suffix(".out.npy")
        run = subprocess.run([str(runner), "-i", str(path), "-o", str(out)], capture_output=True, text=True, errors="replace",
                             timeout=120)
        if _sanitizer_report(run.stderr):
            failures.append(f"{path.name} ({what}): {run.stderr[-1500:]}")
        elif verdict := _runner_verdict(run, path, out, bias, "runner: error: "):
            failures.append(f"{path.name} ({what}): {verdict}")
        out.unlink(missing_ok=True)
    _report(f"ASan+UBSan runner ({' '.join(cc[-3:])}), {len(cases)} .npy cases", collections.Counter(refused=refused), failures)


# ------------------------------------------------------------------------- dynamic builds at the edges of a range


@pytest.fixture(scope="module")
def dynamic_artifacts(tmp_path_factory):
    """Each of fuzzing.dynamic_base_models built once over its ranges: [(base, artifact dir)]."""
    from fluidml_xc.cli import main

    work = tmp_path_factory.mktemp("fuzzdyn")
    built = []
    for base in dynamic_base_models():
        onnx.save(base.model, str(work / f"{base.name}.onnx"))
        art = work / base.name
        assert main(["build", str(work / f"{base.name}.onnx"), "-o", str(art), *base.dim_args(), "--no-profile-runner"]) == 0
        built.append((base, art))
    return built


def _edge_cases(request, base):
    return dynamic_edge_feeds(base, random.Random(_seed(request) + 3), _cases(request, FUZZ_DYNAMIC) // 3)


MODERATE = 1e6
"""Feeds within +-MODERATE (all finite) are compared with ORT value for value; a payload mutation's NaN, infinities or
huge values only by shape (NaN and overflow semantics are tests/test_hostile_nan.py's, docs/GUARANTEES.md)."""


def _accepted_verdict(base, feeds: dict[str, np.ndarray], got: list[np.ndarray], counts) -> str | None:
    if not base.in_range(feeds):
        return f"accepted shapes {[f.shape for f in feeds.values()]} outside the ranges {base.ranges}"
    feeds = {n: f.astype(np.float32) for n, f in feeds.items()}
    want = oracle(base.model.SerializeToString(), feeds)
    if len(want) != len(got) or any(g.shape != w.shape for g, w in zip(got, want)):
        return "output shapes differ from ORT"
    if not all(np.isfinite(f).all() and np.abs(f).max(initial=0) <= MODERATE for f in feeds.values()):
        counts["ran, extreme values (shapes equal to ORT's)"] += 1
        return None
    counts["ran, outputs match ORT"] += 1
    return None if all(_close(g, w) for g, w in zip(got, want)) else "outputs differ from ORT"


def test_fuzz_dynamic_run_at_range_edges(request, tmp_path, dynamic_artifacts):
    """`run` on feeds around each range's edges: exit 0 with ORT's outputs (every in-range feed must run), or
    exit 2 with one line and no output file."""
    from fluidml_xc.npyio import load_npz

    worker = Worker()
    counts: collections.Counter = collections.Counter()
    failures: list[str] = []
    try:
        for base, art in dynamic_artifacts:
            for k, (what, members, must_run) in enumerate(_edge_cases(request, base)):
                case = tmp_path / f"{base.name}{k}"
                case.mkdir()
                with zipfile.ZipFile(case / "in.npz", "w") as archive:
                    for name, data in members.items():
                        archive.writestr(f"{name}.npy", data)
                result = worker.run(case, "run", str(art), "--inputs", "in.npz", "--outputs", "out.npz", "--timeout", "60")
                tag = f"{base.name} case {k} ({what})"
                if result.code == 0:
                    got = load_npz(case / "out.npz")
                    verdict = _accepted_verdict(base, load_npz(case / "in.npz"), list(got.values()), counts)
                elif result.code == 2 and one_error_line(result.stderr) is not None:
                    verdict = "refused an in-range feed" if must_run else None
                    verdict = verdict or ("refused but wrote out.npz" if (case / "out.npz").exists() else None)
                    counts["refused (exit 2)"] += 1
                else:
                    verdict = f"exit {result.code}: {result.stderr[-800:]!r}"
                if verdict:
                    failures.append(f"{tag}: {verdict}")
    finally:
        worker.close()
    _report("dynamic run fuzz at the range edges", counts, failures)


def test_fuzz_dynamic_runner_under_asan_at_range_edges(request, tmp_path, dynamic_artifacts):
    """The same feeds as .npy files through each dynamic artifact's runner built with ASan + UBSan: no sanitizer
    report; exit 0 with ORT's outputs, or exit 2 with one `runner: error:` line and no output file."""
    cc = sanitizer_cc(tmp_path)
    counts: collections.Counter = collections.Counter()
    failures: list[str] = []
    for base, art in dynamic_artifacts:
        runner = sanitized_runner(art, tmp_path, cc)
        for k, (what, members, must_run) in enumerate(_edge_cases(request, base)):
            paths = [tmp_path / f"{base.name}{k}.{name}.npy" for name in base.inputs]
            for path, name in zip(paths, base.inputs):
                path.write_bytes(members[name])
            out = tmp_path / f"{base.name}{k}.out.npy"
            proc = subprocess.run([str(runner), *[a for p in paths for a in ("-i", str(p))], "-o", str(out)],
                                  capture_output=True, text=True, errors="replace", timeout=120)
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            if _sanitizer_report(proc.stderr):
                verdict = proc.stderr[-1500:]
            elif proc.returncode == 0:
                try:
                    feeds = {name: np.load(p, allow_pickle=False) for p, name in zip(paths, base.inputs)}
                except Exception:
                    feeds = None
                verdict = _accepted_verdict(base, feeds, [np.load(out)], counts) if feeds else "accepted a file numpy cannot read"
            elif proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("runner: error: "):
                verdict = "refused an in-range feed" if must_run else ("refused but wrote" if out.exists() else None)
                counts["refused (exit 2)"] += 1
            else:
                verdict = f"exit {proc.returncode}: {proc.stderr[-500:]!r}"
            if verdict:
                failures.append(f"{base.name} case {k} ({what}): {verdict}")
            out.unlink(missing_ok=True)
    _report("dynamic runners under ASan+UBSan at the range edges", counts, failures)
