"""Node names: unique per graph, as later stages key decisions (loop orders, profile rows) by them."""
from __future__ import annotations

import onnx

from ..ir import Node


def unique_names(model: onnx.ModelProto) -> list[str]:
    """The top-level nodes' names as the frontend labels them: unnamed ones `OpType_index`, repeats suffixed."""
    seen, names = set(), []
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        names.append(name)
    return names


def rename_repeated(nodes: list[Node]) -> None:
    """Node names unique, as later stages key decisions by them: an inlined function body or expanded
    subgraph can repeat a name (`GroupNormalization_0/Reshape` five times); repeats get `_1`, `_2`, ..."""
    taken = {node.name for node in nodes}
    kept: set[str] = set()
    for node in nodes:
        if node.name in kept:
            k = 1
            while f"{node.name}_{k}" in taken:
                k += 1
            node.name = f"{node.name}_{k}"
            taken.add(node.name)
        kept.add(node.name)
