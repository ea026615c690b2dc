"""MelWeightMatrix whose sample rate or edges are computed at run time (ONNX Runtime runs it; its output shape,
[dft_length / 2 + 1, num_mel_bins], needs only those two at build time): expanded at import into standard ops.

The filter edges follow ONNX Runtime's arithmetic in float32: mel(f) = 2595 log10(1 + f / 700), num_mel_bins + 2
points evenly spaced in mel from the lower to the upper edge, each back in hertz and on spectrogram bin
floor((dft_length + 1) hz / sample_rate). Filter i rises from bin b_i to 1 at b_(i+1) and falls to 0 at b_(i+2):
(j - b_i) / (b_(i+1) - b_i) and (b_(i+2) - j) / (b_(i+2) - b_(i+1)), in float64 for a float64 output, else
float32, then cast to output_datatype; with the edges reversed (lower above upper) only the peaks that ORT's loops
write are 1.  ORT stops with an error at run time when an edge falls outside the
spectrogram; here the filters then end at its border (every value is computed elementwise, nothing is indexed).
With every input a constant the node is folded instead (frontend/signal_checks.py checks it first).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .builder import NodeBuilder, attr
from .expanders import Scope, expands
from .signal_checks import check_type_binding


def _scalar_const(scope: Scope, name: str) -> int | None:
    t = scope.tensors.get(name)
    return None if t is None or not t.is_const or np.size(t.value) != 1 else int(np.ravel(t.value)[0])


def _bin_edges(bld: NodeBuilder, sample_rate: str, lower: str, upper: str, num_mel_bins: int, dft_length: int) -> str:
    """The num_mel_bins + 2 filter points as float32 spectrogram bin numbers."""
    f32 = TensorProto.FLOAT

    def const(v, hint="c"):
        return bld.constant(np.array(v, np.float32), hint)

    def to_mel(hz: str) -> str:
        ln = bld.add("Log", [bld.add("Add", [const(1.0), bld.add("Div", [hz, const(700.0)])[0]])[0]])[0]
        return bld.add("Mul", [bld.add("Div", [ln, const(np.log(10.0))])[0], const(2595.0)])[0]
    low, high = (to_mel(bld.add("Cast", [e], to=f32)[0]) for e in (lower, upper))
    step = bld.add("Div", [bld.add("Sub", [high, low])[0], const(float(num_mel_bins + 2))])[0]
    points = bld.constant(np.arange(num_mel_bins + 2, dtype=np.float32), "points")
    mel = bld.add("Add", [low, bld.add("Mul", [points, step])[0]])[0]
    power = bld.add("Pow", [const(10.0), bld.add("Div", [mel, const(2595.0)])[0]])[0]
    hz = bld.add("Mul", [bld.add("Sub", [power, const(1.0)])[0], const(700.0)])[0]
    scaled = bld.add("Mul", [hz, const(float(dft_length + 1))])[0]
    return bld.add("Floor", [bld.add("Div", [scaled, bld.add("Cast", [sample_rate], to=f32)[0]])[0]])[0]


def _filters(bld: NodeBuilder, edges: str, num_mel_bins: int, bins: int, compute: int, output: str, out_type: int) -> None:
    """output[j, i] of the triangle filters over bin numbers `edges`, computed in `compute`, stored as out_type."""
    dtype = helper.tensor_dtype_to_np_dtype(compute)
    e = bld.add("Cast", [edges], to=compute)[0]

    def window(start: int) -> str:
        return bld.add("Slice", [e, bld.constant(np.array([start], np.int64), "start"),
                                 bld.constant(np.array([start + num_mel_bins], np.int64), "end")])[0]
    left, centre, right = window(0), window(1), window(2)
    j = bld.constant(np.arange(bins, dtype=dtype)[:, None], "bin")
    one, zero = bld.constant(np.array(1, dtype), "one"), bld.constant(np.array(0, dtype), "zero")
    rise = bld.add("Div", [bld.add("Sub", [j, left])[0], bld.add("Sub", [centre, left])[0]])[0]
    fall = bld.add("Div", [bld.add("Sub", [right, j])[0], bld.add("Sub", [right, centre])[0]])[0]
    rising = bld.add("And", [bld.add("GreaterOrEqual", [j, left])[0], bld.add("Less", [j, centre])[0]])[0]
    falling = bld.add("And", [bld.add("Greater", [j, centre])[0], bld.add("Less", [j, right])[0]])[0]
    value = bld.add("Where", [falling, fall, zero])[0]
    value = bld.add("Where", [rising, rise, value])[0]
    peak = bld.add("Or", [bld.add("LessOrEqual", [left, centre])[0], bld.add("Greater", [right, centre])[0]])[0]
    at_peak = bld.add("And", [bld.add("Equal", [j, centre])[0], peak])[0]
    value = bld.add("Where", [at_peak, one, value])[0]
    bld.add("Cast", [value], [output], to=out_type)


@expands("", "MelWeightMatrix")
def expand_mel_weight_matrix(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    inputs = list(node.input)
    if len(inputs) != 5 or not all(inputs) or not node.output or not node.output[0]:
        return None
    if all(scope.tensors[n].is_const for n in inputs):
        return None  # folded
    num_mel_bins, dft_length = _scalar_const(scope, inputs[0]), _scalar_const(scope, inputs[1])
    if num_mel_bins is None or dft_length is None:
        return None  # the output shape depends on run-time values: the frontend names them
    check_type_binding(node.op_type, node_name, scope.opset, [scope.tensors[n] for n in inputs])
    out_type = int(attr(node, "output_datatype", TensorProto.FLOAT))
    compute = TensorProto.DOUBLE if out_type == TensorProto.DOUBLE else TensorProto.FLOAT
    bld = NodeBuilder(node_name, scope.opset)
    edges = _bin_edges(bld, inputs[2], inputs[3], inputs[4], num_mel_bins, dft_length)
    _filters(bld, edges, num_mel_bins, dft_length // 2 + 1, compute, node.output[0], out_type)
    return bld.nodes
