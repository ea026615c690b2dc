"""Weights and attributes holding NaN or +-Inf: one warning line each on stderr, naming the tensor or attribute and
the node that uses it. The build goes on and propagates them as the rule of docs/GUARANTEES.md says ("NaN,
infinities, signed zeros and denormals"): a NaN weight is almost always a broken export or a corrupted file, and
the outputs it reaches will be NaN."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TextIO

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
               onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ, onnx.TensorProto.FLOAT8E5M2,
               onnx.TensorProto.FLOAT8E5M2FNUZ}


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return f"{_printable(node.op_type)} node '{_printable(node.name)}'" if node.name else f"{_printable(node.op_type)} node #{index}"


def _counts(values: np.ndarray) -> str | None:
    """'2 NaN, 1 +Inf of 27 values', or None when every value is finite."""
    with np.errstate(all="ignore"):
        flat = np.asarray(values, dtype=np.float64).ravel()
    parts = [(int(np.isnan(flat).sum()), "NaN"), (int(np.isposinf(flat).sum()), "+Inf"), (int(np.isneginf(flat).sum()), "-Inf")]
    found = [f"{n} {what}" for n, what in parts if n]
    return f"{', '.join(found)} of {flat.size} value{'s' if flat.size != 1 else ''}" if found else None


def _tensor_counts(tensor: onnx.TensorProto) -> str | None:
    if tensor.data_type not in FLOAT_TYPES or tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.raw_data:
        return None
    try:
        values = numpy_helper.to_array(tensor)
    except Exception:  # a malformed tensor is frontend/validate.py's to report, with its own message
        return None
    if values.dtype.kind == "f" and np.isfinite(values).all():  # the usual case: no float64 copy of the weights
        return None
    return _counts(values) if values.size else None


def _attribute_counts(attr: AttributeProto) -> str | None:
    if attr.type == AttributeProto.FLOAT:
        return None if np.isfinite(attr.f) else f"= {attr.f}"
    if attr.type == AttributeProto.FLOATS:
        return _counts(np.array(attr.floats, np.float64)) if attr.floats else None
    if attr.type == AttributeProto.TENSOR:
        return _tensor_counts(attr.t)
    return None


def _graph_findings(graph: onnx.GraphProto, where: str) -> Iterator[str]:
    users: dict[str, list[str]] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name:
                users.setdefault(name, []).append(_node_label(node, i))
    for init in graph.initializer:
        found = _tensor_counts(init)
        if found:
            used = users.get(init.name, [])
            by = f"used by {used[0]}" + (f" and {len(used) - 1} more" if len(used) > 1 else "") if used else "used by no node"
            yield f"initializer '{_printable(init.name)}'{where} ({by}) holds {found}"
    for i, node in enumerate(graph.node):
        for attr in node.attribute:
            found = _attribute_counts(attr)
            if found:
                yield f"attribute {_printable(attr.name)} of {_node_label(node, i)}{where} {'holds ' if not found.startswith('=') else ''}{found}"
            subgraphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs) if attr.type == AttributeProto.GRAPHS else []
            for sub in subgraphs:
                yield from _graph_findings(sub, f" (in {_printable(attr.name)} of {_node_label(node, i)})")


def nonfinite_findings(model: onnx.ModelProto) -> list[str]:
    """One description per initializer or attribute (Constant values included, subgraphs too) holding NaN or +-Inf."""
    return list(_graph_findings(model.graph, ""))


def warn_nonfinite(model: onnx.ModelProto, stream: TextIO | None = None) -> list[str]:
    """Print one `fluidml-xc: warning:` line per finding on stderr; the lines, for tests."""
    lines = [f"fluidml-xc: warning: {found}; the build keeps it, and the outputs it reaches may be NaN or infinite"
             for found in nonfinite_findings(model)]
    for line in lines:
        print(line, file=stream or sys.stderr)
    return lines
