"""Model validation before import: every declared type, dim, initializer, attribute and opset is checked
against ONNX's schema (onnx.checker per tensor and per node) and against the memory limit, with one
InputError naming the node or tensor. Per-node checks that need shapes run from the frontend (NODE_CHECKS)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping

import numpy as np
import onnx
from onnx import helper

from ..errors import InputError
from ..ir import is_onnx_domain
from ..opspec import all_specs, traits
from ..sizes import MAX_RANK, format_bytes, host_memory_bytes

def default_max_memory(board) -> int:
    """Half the board's RAM (its board file's memory_mb; this machine's when the file gives none): the rest is
    for the OS and the application. The compiler folds constants on this machine, so never more than half of it."""
    host = host_memory_bytes() // 2
    board_mb = getattr(board, "memory_mb", 0) or 0
    return min(host, board_mb * (1 << 20) // 2) if board_mb > 0 else host


@dataclass(frozen=True)
class Limits:
    """What one tensor, the constants together, and arena + weights may take (`--max-memory`)."""

    max_bytes: int = field(default_factory=lambda: host_memory_bytes() // 2)
    pointer_bits: int = 64

    def check(self, what: str, nbytes: int) -> None:
        addressable = 1 << (self.pointer_bits - 1)
        if nbytes >= addressable:
            raise InputError(f"{what} needs {nbytes:,} bytes, more than a {self.pointer_bits}-bit board can address: "
                             "make the model smaller")
        if nbytes > self.max_bytes:
            raise InputError(f"{what} needs {format_bytes(nbytes)} ({nbytes:,} bytes), over the memory limit of "
                             f"{format_bytes(self.max_bytes)}: pass --max-memory SIZE to raise it")

    def check_tensor(self, what: str, shape, dtype) -> None:
        if any(int(d) < 0 for d in shape):
            raise InputError(f"{what} has a negative dimension {list(shape)}: the model is malformed")
        n = 1
        for d in shape:
            n *= int(d)
        self.check(f"{what} (shape {list(shape)}, {np.dtype(dtype).name})", n * np.dtype(dtype).itemsize)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def tensor_dtype(elem_type: int, what: str) -> np.dtype:
    try:
        if elem_type == onnx.TensorProto.UNDEFINED:
            raise KeyError(elem_type)
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else str(elem_type)
        raise InputError(f"{what} has element type {name}, which is not a supported tensor type: re-export the model") from None


def _external_file(tensor: onnx.TensorProto, base_dir: Path) -> tuple[Path, int, int | None]:
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    try:
        offset = int(info.get("offset", 0) or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise InputError(f"initializer {tensor.name!r}: bad offset/length in its external data entry") from None
    if offset < 0 or (length is not None and length < 0):
        raise InputError(f"initializer {tensor.name!r}: negative offset/length in its external data entry")
    return base_dir / location, offset, length


def check_external_data(model: onnx.ModelProto, base_dir: Path) -> None:
    """Every external-data reference names a regular file inside the model's directory, long enough for the tensor."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    root = base_dir.resolve()
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        path, offset, length = _external_file(tensor, base_dir)
        what = f"initializer {tensor.name!r}: external data file {str(path)!r}"
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        if not location or os.path.isabs(location) or not path.resolve().is_relative_to(root):
            raise InputError(f"{what} is outside the model's directory: keep external data beside the model")
        if not path.is_file():
            raise InputError(f"{what} is missing: copy it beside the model")
        dtype = tensor_dtype(tensor.data_type, f"initializer {tensor.name!r}")
        n = 1
        for d in tensor.dims:
            n *= max(int(d), 0)
        need = n * dtype.itemsize
        size = path.stat().st_size
        if length is not None and length != need:
            raise InputError(f"{what} declares {length} bytes for a tensor of {need} bytes: re-export the model")
        if offset + need > size:
            raise InputError(f"{what} is too short ({size} bytes; the tensor needs bytes {offset}..{offset + need}): "
                             "re-copy the file")


def _check_initializer(tensor: onnx.TensorProto, ctx, limits: Limits) -> None:
    what = f"initializer {tensor.name!r}"
    dtype = tensor_dtype(tensor.data_type, what)
    if any(d < 0 for d in tensor.dims):
        raise InputError(f"{what} has a negative dimension {list(tensor.dims)}: the model is malformed")
    limits.check_tensor(what, tuple(tensor.dims), dtype)
    try:
        onnx.checker.check_tensor(tensor, ctx)
    except onnx.checker.ValidationError as exc:
        raise InputError(f"{what} is malformed ({_first_line(exc)}): re-export the model") from None
    n = int(np.prod(tensor.dims, dtype=object)) if tensor.dims else 1
    if tensor.HasField("raw_data") and tensor.data_location != onnx.TensorProto.EXTERNAL:
        need = n * dtype.itemsize
        if dtype.itemsize == 1 and dtype.name in ("int4", "uint4", "float4_e2m1fn"):
            need = (n + 1) // 2
        elif dtype.name in ("int2", "uint2"):
            need = (n + 3) // 4
        if len(tensor.raw_data) != need:
            raise InputError(f"{what} holds {len(tensor.raw_data)} bytes of raw_data for shape {list(tensor.dims)} "
                             f"{dtype.name} ({need} bytes): re-export the model")
    elif tensor.data_location != onnx.TensorProto.EXTERNAL and tensor.data_type != onnx.TensorProto.STRING:
        field = helper.tensor_dtype_to_field(tensor.data_type)
        held = len(getattr(tensor, field))
        per_value = {onnx.TensorProto.COMPLEX64: 0.5, onnx.TensorProto.COMPLEX128: 0.5}.get(tensor.data_type, 1)
        packed = {onnx.TensorProto.INT4: 2, onnx.TensorProto.UINT4: 2, onnx.TensorProto.FLOAT4E2M1: 2,
                  getattr(onnx.TensorProto, "INT2", -1): 4, getattr(onnx.TensorProto, "UINT2", -1): 4}.get(tensor.data_type, 1)
        need = -(-n // packed) / per_value
        if held != need:
            raise InputError(f"{what} holds {held} values in {field} for shape {list(tensor.dims)} {dtype.name} "
                             f"({int(need)} needed): re-export the model")


def check_input_shape(name: str, shape: tuple[int, ...], ttype) -> None:
    """An --input-shape against the input's declared type: same rank, at most MAX_RANK dims."""
    if len(shape) > MAX_RANK:
        raise InputError(f"--input-shape {name}=... has {len(shape)} dims; at most {MAX_RANK} are supported")
    if ttype is not None and ttype.HasField("shape") and len(ttype.shape.dim) != len(shape):
        declared = "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim)
        raise InputError(f"--input-shape {name}={'x'.join(map(str, shape))} has {len(shape)} dims but the model declares "
                         f"{name} as {declared or 'a scalar'} (rank {len(ttype.shape.dim)}): give one size per dim")


_VALUE_KEYS = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings",
               "sparse_value")


def _check_constant(node: onnx.NodeProto, name: str) -> None:
    values = [a.name for a in node.attribute if a.name in _VALUE_KEYS]
    if len(values) != 1:
        raise InputError(f"Constant node {name!r} has {len(values) or 'no'} value attribute{'s' if len(values) > 1 else ''}: "
                         "it needs exactly one of value, value_float(s), value_int(s), value_string(s)")


def _check_value_info(vi: onnx.ValueInfoProto, what: str, limits: Limits) -> None:
    if not vi.type.HasField("tensor_type"):
        return
    tt = vi.type.tensor_type
    if tt.elem_type or what.startswith("input"):
        tensor_dtype(tt.elem_type, f"{what} {vi.name!r}")
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value < -1:  # -1: a size left open (paddle2onnx writes them so; ORT reads them so)
            raise InputError(f"{what} {vi.name!r} has a negative dimension {d.dim_value}: the model is malformed")


def _check_names(graph: onnx.GraphProto, where: str) -> None:
    """protobuf hands out bytes for a string field that is not valid UTF-8: refuse such names."""
    def bad(value, what: str) -> None:
        if not isinstance(value, str):
            raise InputError(f"{what} {value!r}{where} is not valid UTF-8: rename it in the model")

    bad(graph.name, "the graph name")
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        bad(vi.name, "tensor name")
    for tensor in graph.initializer:
        bad(tensor.name, "initializer name")
    for i, node in enumerate(graph.node):
        for value in (node.name, node.op_type, node.domain):
            bad(value, f"node {i}'s name/op/domain")
        for value in [*node.input, *node.output]:
            bad(value, f"tensor name (node {i})")
        for attr in node.attribute:
            bad(attr.name, f"attribute name (node {i})")
            if attr.type == onnx.AttributeProto.GRAPH:
                _check_names(attr.g, f" (in a subgraph of node {i})")
            for sub in attr.graphs:
                _check_names(sub, f" (in a subgraph of node {i})")


def check_opsets(model: onnx.ModelProto) -> None:
    """Names are text and the ONNX opset is one this onnx knows (run before anything reads op types)."""
    _check_names(model.graph, "")
    for entry in model.opset_import:
        if not isinstance(entry.domain, str):
            raise InputError(f"opset domain {entry.domain!r} is not valid UTF-8: fix the model's opset_import")
    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if is_onnx_domain(entry.domain) and not 1 <= entry.version <= newest:
            raise InputError(f"the model imports ONNX opset {entry.version}; this onnx {onnx.__version__} knows opsets 1 to "
                             f"{newest}: re-export it with a supported opset")


def validate_model(model: onnx.ModelProto, limits: Limits | None = None, node_names: list[str] | None = None) -> None:
    """Types, dims, opsets, initializers and node attributes; one InputError naming what is wrong."""
    limits = limits or Limits()
    newest = onnx.defs.onnx_opset_version()
    check_opsets(model)
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version or onnx.IR_VERSION
    ctx.opset_imports = {entry.domain or "": entry.version for entry in model.opset_import} or {"": newest}
    initializers = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in initializers:
            _check_value_info(vi, "input", limits)
    for vi in model.graph.output:
        _check_value_info(vi, "output", limits)
    total = 0
    for tensor in model.graph.initializer:
        _check_initializer(tensor, ctx, limits)
        total += int(np.prod(tensor.dims, dtype=object) if tensor.dims else 1) * tensor_dtype(tensor.data_type, "").itemsize
    limits.check("the initializers together", total)
    names = node_names or [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]
    produced = {vi.name: "a graph input" for vi in model.graph.input} | {t.name: "an initializer" for t in model.graph.initializer}
    for node, name in zip(model.graph.node, names):
        for out in node.output:
            if out and out in produced:
                raise InputError(f"node {name!r} ({node.op_type}) writes {out!r}, which is already {produced[out]}: "
                                 "every tensor must have one producer")
            if out:
                produced[out] = f"written by node {name!r}"
    for node, name in zip(model.graph.node, names):
        if node.op_type == "Constant" and is_onnx_domain(node.domain):
            _check_constant(node, name)
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue  # subgraphs read outer names: checked when expanded
        if _no_schema(node, ctx.opset_imports):
            continue  # the importer lists it with every other unsupported op (unsupported.Missing)
        try:
            onnx.checker.check_node(node, ctx)
        except onnx.checker.ValidationError as exc:
            raise InputError(f"node {name!r} ({node.op_type}): {_first_line(exc)}: fix the model") from None
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                _check_initializer(attr.t, ctx, limits)
        check = ATTRIBUTE_CHECKS.get(node.op_type)
        if check is not None and is_onnx_domain(node.domain):
            check(node, name)
        if is_onnx_domain(node.domain):
            _check_flags(node, name)


def _no_schema(node: onnx.NodeProto, opset_imports: dict[str, int]) -> bool:
    """ONNX defines no schema for the node's op at its domain's imported version."""
    domain = "" if is_onnx_domain(node.domain) else node.domain
    if domain not in opset_imports:
        return False
    try:
        onnx.defs.get_schema(node.op_type, opset_imports[domain], node.domain)
    except onnx.defs.SchemaError:
        return True
    return False


def _attr(node: onnx.NodeProto, key: str, default=None):
    for attr in node.attribute:
        if attr.name == key:
            return helper.get_attribute_value(attr)
    return default


FLAGS = {"keepdims", "noop_with_empty_axes", "select_last_index", "exclusive", "reverse", "ceil_mode",
         "count_include_pad", "transA", "transB", "upper", "largest", "sorted", "center_point_box", "fmod",
         "detect_negative", "detect_positive", "saturate", "layout", "input_forget", "linear_before_reset",
         "storage_order", "allowzero", "training_mode", "onesided", "inverse", "normalized",
         "periodic", "align_corners", "new_axis", "ignore_nan", "interleaved"}
"""Integer attributes that are booleans in the schema: 0 or 1, nothing else (implementations disagree on 2^31)."""


def _check_flags(node: onnx.NodeProto, name: str) -> None:
    for attr in node.attribute:
        if attr.name in FLAGS and attr.type == onnx.AttributeProto.INT and attr.i not in (0, 1):
            raise InputError(f"{node.op_type} node {name!r}: attribute {attr.name} is {attr.i}; it is a flag: 0 or 1")


_AUTO_PAD = {b"NOTSET", b"SAME_UPPER", b"SAME_LOWER", b"VALID"}


def _check_conv_attributes(node: onnx.NodeProto, name: str) -> None:
    pad = _attr(node, "auto_pad", b"NOTSET")
    if pad not in _AUTO_PAD:
        shown = pad.decode(errors="replace") if isinstance(pad, bytes) else pad
        raise InputError(f"{node.op_type} node {name!r}: auto_pad {shown!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    group = _attr(node, "group", 1)
    if group is not None and group < 1:
        raise InputError(f"{node.op_type} node {name!r}: group {group} must be at least 1")
    for key in ("strides", "dilations"):
        values = _attr(node, key, [])
        if any(v < 1 for v in values):
            raise InputError(f"{node.op_type} node {name!r}: {key} {list(values)} must all be at least 1")
    if any(v < 0 for v in _attr(node, "pads", [])):
        raise InputError(f"{node.op_type} node {name!r}: negative pads {list(_attr(node, 'pads'))} are not supported")


ATTRIBUTE_CHECKS = {op: _check_conv_attributes for op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv",
                                                          "AveragePool", "MaxPool", "LpPool", "MaxUnpool")}
"""op -> attribute check that onnx.checker does not do (values, not types)."""


def _conv_groups(op: str, name: str, attrs: dict, shapes: list) -> None:
    weight_index = {"QLinearConv": 3}.get(op, 1)
    if len(shapes) <= weight_index or shapes[0] is None or shapes[weight_index] is None:
        return
    x, w = shapes[0], shapes[weight_index]
    group = int(attrs.get("group", 1))
    if len(x) < 2 or len(w) < 2 or len(x) != len(w):
        raise InputError(f"{op} node {name!r}: input shape {list(x)} and weight shape {list(w)} do not match")
    if op == "ConvTranspose":
        ok = x[1] == w[0] and x[1] % group == 0
        need = f"weight dim 0 ({w[0]}) must equal the {x[1]} input channels, divisible by group {group}"
    else:
        ok = x[1] == w[1] * group and w[0] % group == 0
        need = (f"group {group} must divide the {x[1]} input channels and the {w[0]} output channels, "
                f"with weight dim 1 ({w[1]}) = channels / group")
    if not ok:
        raise InputError(f"{op} node {name!r}: {need}")


def _reshape_count(op: str, name: str, attrs: dict, shapes: list, outputs: list) -> None:
    if not shapes or shapes[0] is None or not outputs or outputs[0] is None:
        return
    n_in, n_out = int(np.prod(shapes[0], dtype=object)), int(np.prod(outputs[0], dtype=object))
    if n_in != n_out:
        raise InputError(f"Reshape node {name!r}: cannot reshape {list(shapes[0])} ({n_in} elements) to "
                         f"{list(outputs[0])} ({n_out} elements): fix the shape input")


def _axis_in_range(op: str, name: str, attrs: dict, shapes: list) -> None:
    if not shapes or shapes[0] is None:
        return
    rank = len(shapes[0])
    top = rank if traits(op).axis_attr == "boundary" else rank - 1
    axis = attrs.get("axis")
    if isinstance(axis, (int, np.integer)) and not -rank <= int(axis) <= top:
        raise InputError(f"{op} node {name!r}: axis {int(axis)} is outside [{-rank}, {top}] for an input of rank {rank}")
    axes = attrs.get("axes")
    if isinstance(axes, (list, tuple)) and any(not -rank <= int(a) < rank for a in axes):
        raise InputError(f"{op} node {name!r}: axes {list(axes)} are outside [{-rank}, {rank - 1}] for an input of rank {rank}")


def _clip_bounds(op: str, name: str, attrs: dict, shapes: list) -> None:
    for i, which in ((1, "min"), (2, "max")):
        if i < len(shapes) and shapes[i] is not None and int(np.prod(shapes[i], dtype=object)) != 1:
            raise InputError(f"Clip node {name!r}: {which} has shape {list(shapes[i])}; it must be a scalar")


def _shape_checks(op: str, name: str, attrs: dict, shapes: list) -> None:
    if op == "Clip":
        _clip_bounds(op, name, attrs, shapes)
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        _conv_groups(op, name, attrs, shapes)
    if traits(op).axis_attr is not None:
        _axis_in_range(op, name, attrs, shapes)


ShapeCheck = Callable[[str, str, dict, list], None]


class ShapeChecks(Mapping[str, ShapeCheck]):
    """op -> check(op, node name, attrs, input shapes) run before the node's shapes are inferred: the conv groups,
    Clip's bounds and the axis range of every op whose OpSpec has axis_attr (asked on use, so the op families load
    with the first check, not with this module)."""

    CHECKED = ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "Clip")

    def __getitem__(self, op: str) -> ShapeCheck:
        if op in self.CHECKED or traits(op).axis_attr is not None:
            return _shape_checks
        raise KeyError(op)

    def __iter__(self) -> Iterator[str]:
        axis_ops = {op for (_, op), specs in all_specs().items() if any(s.axis_attr for s in specs)}
        return iter(sorted(set(self.CHECKED) | axis_ops))

    def __len__(self) -> int:
        return sum(1 for _ in self)


SHAPE_CHECKS = ShapeChecks()
OUTPUT_CHECKS = {"Reshape": _reshape_count}
"""op -> check(op, node name, attrs, input shapes, output shapes) run after inference."""
