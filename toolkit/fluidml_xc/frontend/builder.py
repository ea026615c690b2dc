"""The node builder the import-time expansions write their replacement ONNX nodes with, and the attribute and
nested-graph helpers they share (outer-scope references, renaming, the op types a graph holds)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper


def attr(node: onnx.NodeProto, name: str, default=None):
    """One attribute's value as onnx.helper reads it (a TensorProto, bytes, a GraphProto, ...), or `default`."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def attrs(node: onnx.NodeProto) -> dict:
    """Every attribute as the compiler's graph keeps it: tensors as arrays, strings decoded."""
    values = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        values[a.name] = value
    return values


def _nested(a: onnx.AttributeProto) -> list[onnx.GraphProto]:
    if a.type == onnx.AttributeProto.GRAPH:
        return [a.g]
    if a.type == onnx.AttributeProto.GRAPHS:
        return list(a.graphs)
    return []


def op_types(graph: onnx.GraphProto) -> set[str]:
    """The op types of `graph`'s nodes and of every graph nested in them."""
    types = set()
    for node in graph.node:
        types.add(node.op_type)
        for a in node.attribute:
            for g in _nested(a):
                types |= op_types(g)
    return types


def defined(graph: onnx.GraphProto) -> set[str]:
    """The names a graph defines itself: its inputs, initializers and node outputs."""
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def outer_references(graph: onnx.GraphProto) -> set[str]:
    """Names a (nested) graph reads from enclosing scopes."""
    local, found = defined(graph), set()
    for node in graph.node:
        found.update(n for n in node.input if n and n not in local)
        for a in node.attribute:
            for g in _nested(a):
                found.update(n for n in outer_references(g) if n not in local)
    found.update(o.name for o in graph.output if o.name not in local)
    return found


def _rename_nested(graph: onnx.GraphProto, rename: Callable[[str], str]) -> onnx.GraphProto:
    """A copy of a nested graph whose references to outer names go through `rename`."""
    out = onnx.GraphProto()
    out.CopyFrom(graph)
    local = defined(graph)

    def outer(name: str) -> str:
        return name if not name or name in local else rename(name)
    for node in out.node:
        for i, name in enumerate(node.input):
            node.input[i] = outer(name)
        for a in node.attribute:
            rename_in_attribute(a, outer)
    for o in out.output:
        o.name = outer(o.name)
    return out


def rename_in_attribute(a: onnx.AttributeProto, rename: Callable[[str], str]) -> None:
    """Outer-scope references of a GRAPH / GRAPHS attribute's graphs renamed in place."""
    if a.type == onnx.AttributeProto.GRAPH:
        a.g.CopyFrom(_rename_nested(a.g, rename))
    elif a.type == onnx.AttributeProto.GRAPHS:
        for g in a.graphs:
            g.CopyFrom(_rename_nested(g, rename))


class NodeBuilder:
    """Replacement nodes for one node `node_name`: every name it makes starts with `node_name/` and is numbered."""

    def __init__(self, node_name: str, opset: int):
        self.prefix, self.opset = node_name + "/", opset
        self.nodes: list[onnx.NodeProto] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}{hint}_{self.count}"

    def add(self, op: str, inputs: list[str], outputs: list[str] | None = None, **attributes) -> list[str]:
        outputs = outputs or [self.name(op.lower())]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=self.name(op), **attributes))
        return outputs

    def constant(self, value: np.ndarray, hint: str = "const") -> str:
        return self.add("Constant", [], [self.name(hint)], value=numpy_helper.from_array(np.asarray(value)))[0]

    def unsqueeze(self, x: str, axis: int, output: str | None = None) -> str:
        outs = [output] if output else None
        if self.opset >= 13:
            return self.add("Unsqueeze", [x, self.constant(np.array([axis], dtype=np.int64), "axes")], outs)[0]
        return self.add("Unsqueeze", [x], outs, axes=[axis])[0]

    def instantiate(self, graph: onnx.GraphProto, tag: str, bindings: dict[str, str]) -> list[str]:
        """Copy `graph`'s nodes with its inputs bound to `bindings` and its own tensors renamed; its outputs' names."""
        local = defined(graph)
        prefix = f"{self.prefix}{tag}/"

        def rename(name: str) -> str:
            if not name:
                return ""
            if name in bindings:
                return bindings[name]
            return prefix + name if name in local else name
        for init in graph.initializer:
            self.nodes.append(helper.make_node("Constant", [], [rename(init.name)], name=self.name("Constant"), value=init))
        for i, inner in enumerate(graph.node):
            new = onnx.NodeProto()
            new.CopyFrom(inner)
            del new.input[:]
            del new.output[:]
            new.input.extend(rename(n) for n in inner.input)
            new.output.extend(rename(n) for n in inner.output)
            for a in new.attribute:
                rename_in_attribute(a, rename)
            new.name = f"{prefix}{inner.name or inner.op_type}_{i}"
            self.nodes.append(new)
        return [rename(o.name) for o in graph.output]
