"""A greedy decoder Loop run at run time (issue #26): import, lowering and JIT times, and latency beside ONNX Runtime.

The decoder is tests/test_loop_runtime.py's, scaled up (default: 501 steps, hidden 256, vocabulary 512, as a
table-structure recognizer's decoding loop); no end token is given, so every run takes all the steps.

    python benchmarks/loop_decoder.py [--steps 501 --hidden 256 --vocab 512 --repeat 20]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=501)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    import onnxruntime as ort
    import test_loop_runtime as decoders
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.run.backend import JitModel
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    decoders.MAX_STEPS, decoders.HIDDEN, decoders.VOCAB = args.steps, args.hidden, args.vocab
    model = decoders.decoder()
    t0 = time.perf_counter()
    graph = import_graph(model)
    t1 = time.perf_counter()
    lowered = lower(graph, machine_spec(get_board("x86_64")), LowerOptions())
    t2 = time.perf_counter()
    jit = JitModel(lowered)
    t3 = time.perf_counter()
    print(f"nodes {[n.op_type for n in graph.nodes]}, import {t1 - t0:.2f} s, lower {t2 - t1:.2f} s, "
          f"JIT {t3 - t2:.2f} s, arena {lowered.tail.arena_bytes} bytes")
    feeds = decoders.feeds_for(0)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, run in (("fluidml-xc (JIT)", lambda: jit(feeds)), ("onnxruntime", lambda: session.run(None, feeds))):
        out = run()
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        print(f"{name:<18} {len(out[1])} steps, median {np.median(times) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
