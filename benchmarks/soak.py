#!/usr/bin/env python3
"""Soak: many runs of one model in one process, with resident memory and open file descriptors flat and the
outputs right, through the runner (`runner --bench N`) and through the C API (tests/c/app_soak.c: fxc_run in a
loop, outputs poisoned before and compared after every run), on one thread and on two application threads each
running its own arena at the same time.

    python benchmarks/soak.py                                  # 100,000 runs on x86_64, 10,000 under qemu-aarch64
    python benchmarks/soak.py --runs 2000 --qemu-runs 0        # what tests/test_soak.py runs by default

Resident bytes (/proc/self/statm) and descriptors (/proc/self/fd) are read in the soaking process after the
warm-up (the C API: after a tenth of the runs) and after the last run; under qemu they are qemu's. A soak
passes when the descriptors are equal, the resident bytes grew by at most RSS_SLACK (EMULATED_RSS_SLACK under
qemu), every C API run gave the first run's bytes, and the last outputs equal ONNX Runtime's. The x86_64 soak
also calls run/execute.run_artifact (one runner process a call) --process-runs times from this process: its
descriptors equal, its resident bytes within PYTHON_RSS_SLACK, no fxc-run-* directory left behind, every
call's outputs equal ONNX Runtime's. Prints one line per soak and a JSON list.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "toolkit"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RSS_SLACK = 128 << 10
"""Resident growth allowed from start to end natively: a few pages (stdio, lazily touched data); a leak of 16
bytes a run shows up as 1.4 MiB over 90,000 runs."""
EMULATED_RSS_SLACK = 1 << 20
"""Under qemu-user the resident bytes are qemu's, which jump by about 380 KiB at random moments of a run (its own
host allocations: the same soak grew 12 KiB over 1,600 runs and 376 KiB over 700)."""
PYTHON_RSS_SLACK = 4 << 20
"""This Python process's growth allowed over the run_artifact loop (its allocator keeps freed arenas)."""
APP = ROOT / "tests" / "c" / "app_soak.c"
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


@dataclass(frozen=True)
class Soak:
    kind: str
    """runner, c-api, c-api-2-threads or run_artifact"""
    board: str
    runs: int
    """runs per thread"""
    rss_start_bytes: int
    rss_end_bytes: int
    fds_start: int
    fds_end: int
    wall_s: float
    mismatches: int
    outputs_ok: bool
    emulated: bool = False
    left_over: int = 0
    """temporary directories a run left behind (run_artifact)"""

    @property
    def flat(self) -> bool:
        return (self.fds_start == self.fds_end >= 0 and self.rss_start_bytes > 0
                and self.rss_end_bytes - self.rss_start_bytes <= self.rss_slack)

    @property
    def rss_slack(self) -> int:
        if self.kind == "run_artifact":
            return PYTHON_RSS_SLACK
        return EMULATED_RSS_SLACK if self.emulated else RSS_SLACK

    @property
    def ok(self) -> bool:
        return self.flat and self.mismatches == 0 and self.outputs_ok and self.left_over == 0

    def line(self) -> str:
        return (f"{self.kind:<16} {self.board:<13} {self.runs:>8,} runs  rss {self.rss_start_bytes / 1024:,.0f} -> "
                f"{self.rss_end_bytes / 1024:,.0f} KiB  fds {self.fds_start} -> {self.fds_end}  "
                f"{self.wall_s:8.2f} s  {'ok' if self.ok else 'FAIL'}")


def soak_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv + Relu + pooling + Gemm + Softmax on a 1x8x16x16 image (tens of microseconds a run on x86_64)."""
    rng = np.random.default_rng(24)
    consts = {"w": rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2,
              "b": rng.standard_normal(16).astype(np.float32) * 0.1,
              "fc": rng.standard_normal((16, 10)).astype(np.float32) * 0.3,
              "fb": rng.standard_normal(10).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"])]
    graph = helper.make_graph(nodes, "soak", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 16, 16, 16])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((1, 8, 16, 16)).astype(np.float32)}


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def build(model: onnx.ModelProto, board: str, work: Path) -> Path:
    from fluidml_xc.build import BuildOptions, build_model

    path = work / "soak.onnx"
    onnx.save(model, str(path))
    return build_model(path, BuildOptions(board=board, out_dir=work / f"soak-{board}", record_last=False,
                                          profile_runner=False)).artifact


def _manifest(artifact: Path) -> dict:
    return json.loads((artifact / "manifest.json").read_text())


def _emulator(artifact: Path) -> list[str]:
    from fluidml_xc.artifact import read_manifest
    from fluidml_xc.run.execute import emulator_command

    return emulator_command(read_manifest(artifact))


def _close(got: list[np.ndarray], expected: list[np.ndarray]) -> bool:
    return len(got) == len(expected) and all(
        g.shape == e.shape and np.allclose(g, e, **TOLERANCE) for g, e in zip(got, expected))


def soak_runner(artifact: Path, feeds: dict[str, np.ndarray], expected: list[np.ndarray], runs: int, work: Path) -> Soak:
    """`runner -i ... -o ... --bench RUNS` in one process; its JSON holds the resident bytes and descriptors."""
    np.save(work / "x.npy", feeds["x"])
    outs = [work / f"runner-out{k}.npy" for k in range(len(expected))]
    command = [*_emulator(artifact), str(artifact / "runner"), "-i", str(work / "x.npy"), "--force",
               *[a for o in outs for a in ("-o", str(o))], "--bench", str(runs), "--warmup", "20"]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    report = json.loads(proc.stdout.splitlines()[-1])
    return Soak("runner", _manifest(artifact)["board"], runs, report["rss_start_bytes"], report["rss_end_bytes"],
                report["fds_start"], report["fds_end"], wall, 0, _close([np.load(o) for o in outs], expected),
                bool(_emulator(artifact)))


def compile_app(artifact: Path, work: Path) -> Path:
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_target

    manifest = _manifest(artifact)
    return compile_c_program(get_target(manifest["target"]), manifest["cpu"], [APP], [artifact, APP.parent],
                             [artifact / "libmodel.a", "-lpthread"], work / f"app_soak-{manifest['board']}")


def soak_c_api(app: Path, artifact: Path, feeds: dict[str, np.ndarray], expected: list[np.ndarray], runs: int,
               threads: int, work: Path) -> Soak:
    """tests/c/app_soak.c: RUNS fxc_run calls on each of `threads` application threads, each with its own arena."""
    raw_in = work / "x.bin"
    raw_in.write_bytes(np.ascontiguousarray(feeds["x"]).tobytes())
    outs = [work / f"c-out{k}.bin" for k in range(len(expected))]
    start = time.perf_counter()
    proc = subprocess.run([*_emulator(artifact), str(app), str(runs), str(threads), str(raw_in), *map(str, outs)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{app.name} failed with exit status {proc.returncode}: {proc.stderr.strip()}")
    report = json.loads(proc.stdout.splitlines()[-1])
    got = [np.frombuffer(o.read_bytes(), e.dtype).reshape(e.shape) for o, e in zip(outs, expected)]
    kind = "c-api" if threads == 1 else f"c-api-{threads}-threads"
    return Soak(kind, _manifest(artifact)["board"], runs, report["rss_start_bytes"], report["rss_end_bytes"],
                report["fds_start"], report["fds_end"], wall, report["mismatches"], _close(got, expected),
                bool(_emulator(artifact)))


def _holdings() -> tuple[int, int]:
    """This process's resident bytes and open descriptors."""
    import os

    resident = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return resident, len(os.listdir("/proc/self/fd"))


def soak_run_artifact(artifact: Path, feeds: dict[str, np.ndarray], expected: list[np.ndarray], runs: int) -> Soak:
    """run_artifact `runs` times from this process (a runner process each), outputs checked every time."""
    import glob
    import os

    from fluidml_xc.run.execute import run_artifact

    left_over = f"{tempfile.gettempdir()}/fxc-run-{os.getpid()}-*"
    held, bad = (0, 0), 0
    start = time.perf_counter()
    for r in range(runs):
        if r == runs // 10:
            held = _holdings()
        bad += not _close(list(run_artifact(artifact, feeds, timeout=600).slots), expected)
    wall = time.perf_counter() - start
    end = _holdings()
    return Soak("run_artifact", _manifest(artifact)["board"], runs, held[0], end[0], held[1], end[1], wall, bad, bad == 0,
                bool(_emulator(artifact)), len(glob.glob(left_over)))


def soak_board(board: str, runs: int, work: Path, process_runs: int = 0) -> list[Soak]:
    """The soaks of one board: the runner, the C API on one thread, the C API on two threads, and with
    process_runs the run_artifact loop."""
    model, feeds = soak_model()
    expected = ort_outputs(model, feeds)
    work = work / board
    work.mkdir(parents=True, exist_ok=True)
    artifact = build(model, board, work)
    app = compile_app(artifact, work)
    soaks = [soak_runner(artifact, feeds, expected, runs, work),
             soak_c_api(app, artifact, feeds, expected, runs, 1, work),
             soak_c_api(app, artifact, feeds, expected, runs, 2, work)]
    return soaks + ([soak_run_artifact(artifact, feeds, expected, process_runs)] if process_runs else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs on x86_64 (default 100,000)")
    parser.add_argument("--qemu-runs", type=int, default=10_000, help="runs under qemu-aarch64 (default 10,000; 0: none)")
    parser.add_argument("--process-runs", type=int, default=1_000,
                        help="run_artifact calls on x86_64, one runner process each (default 1,000; 0: none)")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="fxc-soak-") as tmp:
        for board, runs, process_runs in (("x86_64", args.runs, args.process_runs), ("qemu-aarch64", args.qemu_runs, 0)):
            if runs > 0:
                for soak in soak_board(board, runs, Path(tmp), process_runs):
                    print(soak.line(), flush=True)
                    results.append(soak)
    print(json.dumps([{**asdict(s), "ok": s.ok} for s in results]))
    return 0 if all(s.ok for s in results) else 1


if __name__ == "__main__":
    sys.exit(main())
