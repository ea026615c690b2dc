"""The whole-image Winograd form as two graph nodes, made after the optimizer chose a kernels/winograd.py WHOLE_ORDERS
loop order for a conv: WinogradInput (ops/conv/winograd_input.py) transforms the conv's input into V, an ordinary
activation tensor (planned by the memory plan, listed by `inspect`), and the conv, given V as its last input
(V_INPUT_ATTR), runs the GEMM and the output transform over it (ops/conv/winograd.py emit_whole)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, Tensor
from ..kernels.conv_geometry import begin_pads
from ..kernels.winograd import V_INPUT_ATTR, WHOLE_ORDERS
from ..passes.winograd import node_copies
from ..opspec import OUR_DOMAIN


def split_whole_image(graph: Graph, loop_orders, threads: int = 1) -> Graph:
    """`graph` with every conv whose order in `loop_orders` is a whole-image one preceded by its WinogradInput, which
    writes copies of V for `threads` threads (v_copies; 1: one V)."""
    convs = {n.name for n in graph.nodes if loop_orders.get(n.name) in WHOLE_ORDERS and not n.attrs.get(V_INPUT_ATTR)}
    if not convs:
        return graph
    tensors, nodes = dict(graph.tensors), []
    for node in graph.nodes:
        if node.name not in convs:
            nodes.append(node)
            continue
        m = WHOLE_ORDERS[loop_orders[node.name]]
        x, out = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        groups = int(node.attrs.get("group", 1))
        (N, C, H, W), (OH, OW) = x.shape, out.shape[2:]
        tiles = -(-OH // m) * -(-OW // m)
        copies = node_copies(graph, node, threads)
        v = Tensor(f"{node.name}.winograd_v", np.dtype(np.float32), (copies * N, groups, (m + 2) ** 2, tiles, C // groups))
        made = [v] if copies == 1 else [v, Tensor(f"{node.name}.winograd_copy", np.dtype(np.int32), (N * groups * copies,))]
        tensors.update((t.name, t) for t in made)
        names = [t.name for t in made]
        nodes.append(Node("WinogradInput", f"{node.name}.winograd_input", [x.name], names,
                          {"m": m, "pads": list(conv_begin_pads(node, (H, W), (OH, OW))), "group": groups,
                           "out_hw": [OH, OW], "copies": copies}, OUR_DOMAIN))
        nodes.append(replace(node, inputs=[*node.inputs, *names], attrs={**node.attrs, V_INPUT_ATTR: len(names)}))
    return replace(graph, tensors=tensors, nodes=nodes)


class _Attrs:
    """A node's attributes as kernels/conv_geometry.py begin_pads asks them."""

    def __init__(self, node: Node):
        self.node = node

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)


def conv_begin_pads(node: Node, hw: tuple[int, int], out_hw: tuple[int, int]) -> tuple[int, int]:
    """The top and left padding of a 3x3 stride-1 conv (explicit pads or auto_pad), as lower_conv reads them."""
    top, left = begin_pads(_Attrs(node), hw, [3, 3], [1, 1], [1, 1], out_hw)
    return int(top), int(left)
