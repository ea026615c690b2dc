"""A Scan whose body is one DFT of the step over a signal axis (onnxscript's spectrogram of frames, one frame per
step) becomes one DFT of the whole scan input over the matching axis: the steps are the leading signals of one
batched transform (kernels/fft.py) instead of one Gather, DFT and Unsqueeze per step and a Concat of them all.
The scan axis stays where it was, so a scan output along another axis is a Transpose of the result."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir import is_onnx_domain
from .builder import NodeBuilder, attr


def _constant_value(name: str, body: onnx.GraphProto, tensors: dict) -> np.ndarray | None:
    for n in body.node:
        if n.op_type == "Constant" and n.output[0] == name:
            value = attr(n, "value", None)
            return None if value is None else numpy_helper.to_array(value)
    for init in body.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    outer = tensors.get(name)
    return getattr(outer, "value", None)


def _step_axis(dft: onnx.NodeProto, body: onnx.GraphProto, tensors: dict, opset: int) -> int | None:
    """The DFT's axis as written (None when it is not a build-time constant)."""
    if opset < 20:
        return int(attr(dft, "axis", 1))
    if len(dft.input) < 3 or not dft.input[2]:
        return -2
    value = _constant_value(dft.input[2], body, tensors)
    return None if value is None or np.size(value) != 1 else int(np.ravel(value)[0])


def batch_scanned_dft(bld: NodeBuilder, body: onnx.GraphProto, scan: str, rank: int, in_axis: int, in_dir: int,
                      out_axis: int, out_dir: int, output: str, tensors: dict, opset: int) -> bool:
    """Add the batched form of a stateless one-input one-output Scan over `scan` (rank `rank`) to bld; False (nothing
    added) unless the body is Constants and one DFT of its scan input that is the body's output."""
    dfts = [n for n in body.node if n.op_type == "DFT" and is_onnx_domain(n.domain)]
    if len(dfts) != 1 or any(n.op_type != "Constant" for n in body.node if n is not dfts[0]) or len(body.output) != 1:
        return False
    dft = dfts[0]
    if dft.input[0] != body.input[0].name or body.output[0].name != dft.output[0] or in_dir != out_dir:
        return False
    step_rank = rank - 1
    axis = _step_axis(dft, body, tensors, opset)
    if axis is None or in_axis == rank - 1:
        return False
    axis = axis + step_rank if axis < 0 else axis
    if not 0 <= axis < step_rank - 1:
        return False
    new_axis = axis + 1 if axis >= in_axis else axis
    batched = onnx.GraphProto()
    batched.CopyFrom(body)
    node = next(n for n in batched.node if n.op_type == "DFT")
    if opset < 20:
        for a in list(node.attribute):
            if a.name == "axis":
                node.attribute.remove(a)
        node.attribute.append(helper.make_attribute("axis", new_axis))
    else:
        inputs = list(node.input) + [""] * (3 - len(node.input))
        inputs[2] = bld.constant(np.array(new_axis, np.int64), "axis")
        del node.input[:]
        node.input.extend(inputs)
    result = bld.instantiate(batched, "batched", {body.input[0].name: scan})[0]
    if out_axis == in_axis:
        bld.add("Identity", [result], [output])
    else:
        perm = [d for d in range(rank) if d != in_axis]
        perm.insert(out_axis, in_axis)
        bld.add("Transpose", [result], [output], perm=perm)
    return True
