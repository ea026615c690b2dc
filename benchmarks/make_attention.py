"""Write a single-head self-attention block (Q/K/V projections, Q @ K^T, Softmax, @ V, output projection,
residual) as ONNX, for measuring what layouts do to attention's transposed K:

    python benchmarks/make_attention.py /tmp/attention.onnx --seq 384 --hidden 256
    python benchmarks/bench.py /tmp/attention.onnx --modes greedy,fluid --rounds 5
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def attention_block(seq: int, hidden: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weights = {name: (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32) for name in ("wq", "wk", "wv", "wo")}
    inits = [numpy_helper.from_array(v, n) for n, v in weights.items()]
    inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(hidden), np.float32), "scale"))
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["a"]),
        helper.make_node("MatMul", ["a", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, seq, hidden))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, seq, hidden))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--seq", type=int, default=384)
    parser.add_argument("--hidden", type=int, default=256)
    args = parser.parse_args()
    onnx.save(attention_block(args.seq, args.hidden), args.out)


if __name__ == "__main__":
    main()
