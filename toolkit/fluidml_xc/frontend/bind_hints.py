"""The `--bind NAME=VALUE` an error about an `If` on a run-time condition suggests.

The graph inputs behind the condition are found by walking its producers back; with one such input,
the values it is compared with in that walk (the constants of Equal, Greater, Less, ... and their
neighbours) are candidates, and the first for which the condition (evaluated with onnx.reference) keeps
a branch that builds is the value suggested.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

COMPARISONS = {"Equal": (0,), "Greater": (0, 1, -1), "Less": (0, 1, -1), "GreaterOrEqual": (0, -1), "LessOrEqual": (0, 1)}
"""Comparison op -> offsets tried around the constant it compares with (Greater(x, c): c+1 makes it true, c false)."""


def _cone(model: onnx.ModelProto, name: str) -> tuple[list[onnx.NodeProto], list[str]]:
    """The top-level nodes `name` is computed by (in graph order) and the graph inputs fed at run time behind it."""
    producers = {o: n for n in model.graph.node for o in n.output if o}
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = {vi.name for vi in model.graph.input} - inits
    found, seen, todo, nodes = set(), set(), [name], set()
    while todo:
        n = todo.pop()
        if n in seen or not n:
            continue
        seen.add(n)
        if n in graph_inputs:
            found.add(n)
        elif n in producers:
            nodes.add(id(producers[n]))
            todo.extend(producers[n].input)
    return [n for n in model.graph.node if id(n) in nodes], sorted(found)


def inputs_behind(model: onnx.ModelProto | None, name: str) -> list[str]:
    """The graph inputs (fed at run time) a top-level tensor is computed from."""
    return [] if model is None else _cone(model, name)[1]


def _constants(model: onnx.ModelProto, names: set[str]) -> dict[str, np.ndarray]:
    """The values of the initializers and Constant outputs among `names` (the others' weights stay unread)."""
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.name in names}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] in names:
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _candidates(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> list[float]:
    """The constants the comparisons among `nodes` compare with, each with the offsets COMPARISONS tries."""
    constants = _constants(model, {n for node in nodes if node.op_type in COMPARISONS for n in node.input})
    found: list[float] = []
    for node in nodes:
        offsets = COMPARISONS.get(node.op_type)
        for name in node.input if offsets else ():
            value = constants.get(name)
            if value is not None and value.size == 1 and value.dtype.kind in "biuf":
                found += [np.ravel(value)[0].item() + k for k in offsets]
    return list(dict.fromkeys(found))


def _condition(model: onnx.ModelProto, nodes: list[onnx.NodeProto], cond: str, feed: dict[str, np.ndarray]) -> bool | None:
    from onnx.reference import ReferenceEvaluator

    used = {n for node in nodes for n in node.input}
    inits = [i for i in model.graph.initializer if i.name in used]
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feed.items()]
    graph = helper.make_graph(nodes, "cond", inputs, [helper.make_empty_tensor_value_info(cond)], inits)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            out = ReferenceEvaluator(helper.make_model(graph, opset_imports=model.opset_import)).run(None, feed)[0]
        return bool(np.ravel(out)[0]) if np.size(out) == 1 else None
    except Exception:  # a candidate the cone cannot evaluate is no suggestion
        return None


def constant_condition(model: onnx.ModelProto, cond: str) -> bool | None:
    """The value of a top-level one-element condition computed from initializers and constants only (None: it
    depends on a graph input, or cannot be evaluated)."""
    nodes, behind = _cone(model, cond)
    if behind:
        return None
    if not nodes:
        value = _constants(model, {cond}).get(cond)
        return bool(np.ravel(value)[0]) if value is not None and value.size == 1 else None
    return _condition(model, nodes, cond, {})


def guess_value(model: onnx.ModelProto, cond: str, name: str, tensor, builds: dict[bool, bool]) -> str | None:
    """A value of input `name` (static Tensor `tensor`) for which `cond` keeps a branch that builds
    (`builds`: condition value -> its branch builds), as --bind text; None when none is found."""
    if tensor.size != 1 or np.dtype(tensor.dtype).kind not in "biuf":
        return None
    nodes, _ = _cone(model, cond)
    dtype = np.dtype(tensor.dtype)
    for value in _candidates(model, nodes):
        try:
            array = np.full(tensor.shape, value, dtype=dtype)
        except (OverflowError, ValueError):
            continue
        if array.ravel()[0] != value:
            continue
        taken = _condition(model, nodes, cond, {name: array})
        if taken is not None and builds.get(taken):
            text = array.ravel()[0].item()
            return str(text).lower() if dtype.kind == "b" else str(text)
    return None


def bind_hint(model: onnx.ModelProto | None, cond: str, tensors: dict, builds: dict[bool, bool] | None = None) -> str:
    """`freeze 'sr' at build time: --bind sr=16000 keeps the then branch, which builds with these shapes`."""
    names = inputs_behind(model, cond)
    if not names:
        return "freeze the input it is computed from with --bind NAME=VALUE"
    frozen = "freeze " + " and ".join(repr(n) for n in names) + " at build time"
    if builds and not any(builds.values()):
        return frozen + " with " + " ".join(f"--bind {n}=VALUE" for n in names)
    if not builds or all(builds.values()):
        example = None
        if len(names) == 1 and names[0] in tensors:
            example = guess_value(model, cond, names[0], tensors[names[0]], {True: True, False: False})
        return (frozen + " with " + " ".join(f"--bind {n}=VALUE" for n in names)
                + (f" (e.g. {names[0]}={example}, which keeps the then branch)" if example is not None else ""))
    keep = "then" if builds.get(True) else "else"
    value = guess_value(model, cond, names[0], tensors[names[0]], builds) if len(names) == 1 and names[0] in tensors else None
    if value is not None:
        return f"{frozen}: --bind {names[0]}={value} keeps the {keep} branch, which builds with these input shapes"
    return (frozen + " with " + " ".join(f"--bind {n}=VALUE" for n in names) + f", values for which the condition is "
            f"{'true' if keep == 'then' else 'false'} (the {keep} branch builds with these input shapes)")
