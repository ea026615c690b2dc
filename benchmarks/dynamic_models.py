"""Dynamic copies of models exported at one sequence length (issue #26): what an exporter with dynamic axes writes.

`dynamic_sequence(model)` turns a model whose inputs are [1, 128] (bert_tiny) into one whose dim 1 is the symbol
"seq": every short integer shape vector holding the literal length ([1, 128, -1, 64] of a Reshape, [1, 128] of an
Expand) becomes Shape -> Gather -> Unsqueeze -> Concat of the first input, and every integer constant with the
length along an axis (position ids, aranges of the attention mask) is sliced to the run-time length.

    python benchmarks/dynamic_models.py bert_tiny.onnx bert_tiny_dyn.onnx
    fluidml-xc build bert_tiny_dyn.onnx --dim seq=8..128
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import helper, numpy_helper

SHAPE_VECTOR_MAX = 8
"""A 1-D integer constant of at most this many entries that holds the length is read as a shape."""


def _dims(vi: onnx.ValueInfoProto):
    return vi.type.tensor_type.shape.dim


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _shape_vector(name: str, value: np.ndarray, length: int, seq: str, tag: str) -> list[onnx.NodeProto]:
    """`name` := Concat of the constant's entries with each `length` replaced by the run-time `seq` ([1] int64)."""
    parts, nodes = [], []
    for k, v in enumerate(value.tolist()):
        if v == length:
            parts.append(seq)
        else:
            parts.append(f"{tag}/part{k}")
            nodes.append(helper.make_node("Constant", [], [parts[-1]], name=f"{tag}/part{k}",
                                          value=numpy_helper.from_array(np.array([v], value.dtype))))
    cast = value.dtype != np.int64
    nodes.append(helper.make_node("Concat", parts, [f"{tag}/concat" if cast else name], axis=0, name=f"{tag}/concat"))
    if cast:
        nodes.append(helper.make_node("Cast", [f"{tag}/concat"], [name], to=helper.np_dtype_to_tensor_dtype(value.dtype),
                                      name=f"{tag}/cast"))
    return nodes


def _sliced(name: str, value: np.ndarray, length: int, seq: str, tag: str) -> list[onnx.NodeProto]:
    """`name` := the constant cut to the run-time length along every axis of size `length`."""
    axes = [a for a, n in enumerate(value.shape) if n == length]
    full = f"{tag}/full"
    nodes = [helper.make_node("Constant", [], [full], name=full, value=numpy_helper.from_array(value, full)),
             helper.make_node("Constant", [], [f"{tag}/starts"], name=f"{tag}/starts",
                              value=numpy_helper.from_array(np.zeros(len(axes), np.int64))),
             helper.make_node("Constant", [], [f"{tag}/axes"], name=f"{tag}/axes",
                              value=numpy_helper.from_array(np.array(axes, np.int64)))]
    ends = [seq] * len(axes)
    nodes.append(helper.make_node("Concat", ends, [f"{tag}/ends"], axis=0, name=f"{tag}/ends"))
    nodes.append(helper.make_node("Slice", [full, f"{tag}/starts", f"{tag}/ends", f"{tag}/axes"], [name], name=f"{tag}/slice"))
    return nodes


def dynamic_sequence(model: onnx.ModelProto, dim: int = 1, name: str = "seq") -> onnx.ModelProto:
    """A copy of `model` whose inputs' (and outputs') dim `dim` is the symbol `name`, with the literal length in
    shape vectors and integer constants replaced by the run-time length of the first input."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = {i.name for i in g.initializer}
    inputs = [vi for vi in g.input if vi.name not in inits]
    length = _dims(inputs[0])[dim].dim_value
    if length <= 1:
        raise ValueError(f"input {inputs[0].name!r} has no fixed dim {dim} to make dynamic")
    for vi in [*inputs, *g.output]:
        dims = _dims(vi)
        if len(dims) > dim and dims[dim].dim_value == length:
            dims[dim].Clear()
            dims[dim].dim_param = name
    del g.value_info[:]
    seq = f"{name}/length"
    head = [helper.make_node("Shape", [inputs[0].name], [f"{name}/shape"], name=f"{name}/shape"),
            helper.make_node("Constant", [], [f"{name}/axis"], name=f"{name}/axis", value=numpy_helper.from_array(np.array(dim, np.int64))),
            helper.make_node("Gather", [f"{name}/shape", f"{name}/axis"], [f"{name}/scalar"], axis=0, name=f"{name}/gather"),
            helper.make_node("Constant", [], [f"{name}/zero"], name=f"{name}/zero", value=numpy_helper.from_array(np.array([0], np.int64))),
            helper.make_node("Unsqueeze", [f"{name}/scalar", f"{name}/zero"], [seq], name=f"{name}/unsqueeze")]
    replaced: dict[str, list[onnx.NodeProto]] = {}
    for cname, value in _constants(g).items():
        if value.dtype.kind not in "iu" or cname in {vi.name for vi in inputs}:
            continue
        tag = f"{name}/{cname}"
        if value.ndim == 1 and value.size <= SHAPE_VECTOR_MAX and length in value.tolist():
            replaced[cname] = _shape_vector(cname, value, length, seq, tag)
        elif length in value.shape:
            replaced[cname] = _sliced(cname, value, length, seq, tag)
    nodes = list(head)
    for node in g.node:
        if node.op_type == "Constant" and node.output[0] in replaced:
            nodes += replaced.pop(node.output[0])
        else:
            nodes.append(node)
    for cname, extra in replaced.items():  # initializers: their replacement goes first, the initializer away
        nodes[len(head):len(head)] = extra
        g.initializer.remove(next(i for i in g.initializer if i.name == cname))
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("output")
    parser.add_argument("--dim", type=int, default=1)
    parser.add_argument("--name", default="seq")
    args = parser.parse_args()
    onnx.save(dynamic_sequence(onnx.load(args.model), args.dim, args.name), args.output)


if __name__ == "__main__":
    main()
