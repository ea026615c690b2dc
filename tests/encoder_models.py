"""A BERT-style encoder as exporters write it with a dynamic sequence axis: reshapes to heads whose targets are
computed from Shape (Shape -> Gather -> Unsqueeze -> Concat), positions from Range over the sequence length and an
additive attention mask from the mask input."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, VOCAB, MAX_POS = 32, 4, 50, 128


def _init(rng, name, shape, scale=0.2):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _i64(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def bert_like(seq: int | str = "seq", layers: int = 1) -> onnx.ModelProto:
    """[1, seq] token ids and mask -> [1, seq, HIDDEN]."""
    rng = np.random.default_rng(7)
    dh = HIDDEN // HEADS
    inits = [_init(rng, "word", (VOCAB, HIDDEN), 0.5), _init(rng, "pos", (MAX_POS, HIDDEN), 0.5),
             _i64("zero", 0), _i64("one", 1), _i64("axis0", [0]), _i64("heads_dh", [HEADS, dh]), _i64("hidden", [HIDDEN]),
             _i64("batch", [1]), numpy_helper.from_array(np.array(1 / np.sqrt(dh), np.float32), "scale"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"), numpy_helper.from_array(np.array(1.0, np.float32), "onef")]
    n = helper.make_node
    nodes = [
        n("Shape", ["input_ids"], ["ids_shape"], name="shape"),
        n("Gather", ["ids_shape", "one"], ["seq_len"], axis=0, name="seq_len"),
        n("Unsqueeze", ["seq_len", "axis0"], ["seq_1"], name="seq_1"),
        n("Range", ["zero", "seq_len", "one"], ["positions"], name="positions"),
        n("Gather", ["word", "input_ids"], ["tok"], axis=0, name="tok_emb"),
        n("Gather", ["pos", "positions"], ["posv"], axis=0, name="pos_emb"),
        n("Add", ["tok", "posv"], ["x0"], name="embed"),
        n("Concat", ["batch", "seq_1", "heads_dh"], ["split_shape"], axis=0, name="split_shape"),
        n("Concat", ["batch", "seq_1", "hidden"], ["merge_shape"], axis=0, name="merge_shape"),
        n("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT, name="mask_cast"),
        n("Sub", ["onef", "maskf"], ["mask_inv"], name="mask_inv"),
        n("Mul", ["mask_inv", "neg"], ["mask_add2"], name="mask_scale"),
        n("Unsqueeze", ["mask_add2", "heads_axes"], ["mask_add"], name="mask_unsq"),
    ]
    inits.append(_i64("heads_axes", [1, 2]))
    x = "x0"
    for layer in range(layers):
        p = f"l{layer}_"
        inits += [_init(rng, p + w, (HIDDEN, HIDDEN)) for w in ("wq", "wk", "wv", "wo")]
        for w in ("q", "k", "v"):
            nodes += [n("MatMul", [x, p + "w" + w], [p + w], name=p + w),
                      n("Reshape", [p + w, "split_shape"], [p + w + "4"], name=p + w + "_split"),
                      n("Transpose", [p + w + "4"], [p + w + "h"], perm=[0, 2, 3, 1] if w == "k" else [0, 2, 1, 3],
                        name=p + w + "_heads")]
        nodes += [n("MatMul", [p + "qh", p + "kh"], [p + "s"], name=p + "scores"),
                  n("Mul", [p + "s", "scale"], [p + "ss"], name=p + "scale"),
                  n("Add", [p + "ss", "mask_add"], [p + "sm"], name=p + "mask"),
                  n("Softmax", [p + "sm"], [p + "p"], axis=-1, name=p + "softmax"),
                  n("MatMul", [p + "p", p + "vh"], [p + "c"], name=p + "context"),
                  n("Transpose", [p + "c"], [p + "ct"], perm=[0, 2, 1, 3], name=p + "merge_t"),
                  n("Reshape", [p + "ct", "merge_shape"], [p + "cm"], name=p + "merge"),
                  n("MatMul", [p + "cm", p + "wo"], [p + "o"], name=p + "out"),
                  n("Add", [x, p + "o"], [p + "res"], name=p + "residual")]
        x = p + "res"
    nodes.append(n("Identity", [x], ["output"], name="output"))
    graph = helper.make_graph(nodes, "bert_like",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
                               helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, seq, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
