"""RegexFullMatch's compiled matcher (kernels/regex_dfa.py, docs/REGEX.md): build time of a few patterns, and
matching speed on one long string (MB/s), the JIT-compiled table walk against RE2 (ONNX Runtime's RegexFullMatch on
a one-string tensor) and Python's re, in interleaved rounds; the median of each.

    python benchmarks/regex_match.py [--mb 4] [--rounds 7]
"""
from __future__ import annotations

import argparse
import ctypes
import re
import statistics
import time

import numpy as np
import onnxruntime
from llvmlite import ir
from onnx import TensorProto, helper

from fluidml_xc.kernels.regex_dfa import compile_dfa, emit_matcher
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.jit import jit_engine
from fluidml_xc.target.machine import machine_spec

PATTERNS = {
    "email list": (r"(?:[\w.\-]{1,25}@(?:yahoo|gmail)\.com[,;]\s?)+", "account.name@gmail.com, "),
    "words": (r"(?:[\w.-]+\s)*[\w.-]+", "lorem ipsum-dolor sit_amet. "),
    "utf-8 text": (r"(?s).*\bend", "héllo wörld ☺ "),
}


def session(pattern: str):
    graph = helper.make_graph([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], "regex",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0, help="length of the string matched, MB")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    spec = machine_spec(get_board(None))
    for name, (pattern, unit) in PATTERNS.items():
        started = time.perf_counter()
        dfa = compile_dfa(pattern)
        built = time.perf_counter() - started
        module = ir.Module("bench")
        emit_matcher(module, "match", dfa)
        engine = jit_engine(str(module), spec)
        fn = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_char_p, ctypes.c_int64)(engine.get_function_address("match"))
        text = unit * int(args.mb * 1e6 / len(unit.encode()))
        data = text.encode()
        ort, feed = session(pattern), {"x": np.array([text], dtype=object)}
        compiled = re.compile(pattern.replace("$", r"\Z"), re.ASCII if "é" not in unit else 0)
        runs = {"compiled": lambda: fn(data, len(data)), "RE2 (ORT)": lambda: ort.run(None, feed)[0][0],
                "python re": lambda: compiled.fullmatch(text) is not None}
        answers = {k: bool(run()) for k, run in runs.items()}
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, run in runs.items():
                t = time.perf_counter()
                run()
                times[k].append(time.perf_counter() - t)
        speeds = {k: len(data) / 1e6 / statistics.median(v) for k, v in times.items()}
        print(f"{name}: {pattern!r} -> {dfa.states} states x {dfa.table.shape[1]} classes, built in {built:.3f} s; "
              f"answers {answers}; MB/s " + ", ".join(f"{k} {v:.0f}" for k, v in speeds.items()))
        del engine


if __name__ == "__main__":
    main()
