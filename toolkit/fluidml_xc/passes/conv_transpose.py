"""ConvTranspose with constant weights -> MatMul (the blocked GEMM) + Col2Im (+ bias Add).

Every input pixel i of ConvTranspose adds x[ci, i] * w[ci, co, t] into output o = i * s - pad + t * d;
that is the GEMM cols[(co, t), i] = sum_ci w[ci, co, t] * x[ci, i] followed by Col2Im, which adds
column entry ((co, t), i) into image position i * s - pad + t * d with the same strides, dilations and
pads. So the multiply-adds run in the register-blocked MatMul kernel and only the scatter-add is
left to Col2Im (memory-bound). Groups become a batched MatMul ([G, Cog * K, Cig] @ [N, G, Cig, L]).

Rewritten when W is a float32 constant, 1 to 3 spatial dims, pads >= 0 and every output_padding is
below its stride (then Col2Im's block count equals the input's extent); the node otherwise keeps the
direct scatter lowering (ops/conv.py). Col2Im is emitted in the "fluidml" domain, so the rewrite
works at any opset.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node, is_onnx_domain
from ..opspec import OUR_DOMAIN
from . import graph_pass



def _pads(node: Node, in_sp, k_sp, out_sp, strides, dils) -> list[int] | None:
    """Begin pads then end pads, as ConvTranspose resolves them for the inferred output shape."""
    sp = len(in_sp)
    out_pad = [int(p) for p in (node.attrs.get("output_padding") or [0] * sp)]
    mode = node.attrs.get("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    explicit = node.attrs.get("pads")
    if explicit is not None and not node.attrs.get("output_shape") and mode in ("NOTSET", ""):
        pads = [int(p) for p in explicit]
    else:
        begin, end = [], []
        for d in range(sp):
            total = strides[d] * (in_sp[d] - 1) + out_pad[d] + (k_sp[d] - 1) * dils[d] + 1 - out_sp[d]
            small, large = total // 2, total - total // 2
            begin.append(small if mode == "SAME_UPPER" else large)
            end.append(large if mode == "SAME_UPPER" else small)
        pads = begin + end
    if len(pads) != 2 * sp or min(pads) < 0 or any(p >= s for p, s in zip(out_pad, strides)):
        return None
    # the output the pads give must be the inferred one (and output_padding only extends its end)
    for d in range(sp):
        full = strides[d] * (in_sp[d] - 1) + out_pad[d] + (k_sp[d] - 1) * dils[d] + 1 - pads[d] - pads[sp + d]
        if full != out_sp[d]:
            return None
    return pads


def _const(graph: Graph, base: str, value: np.ndarray) -> str:
    return graph.add_tensor(base, value.dtype, value.shape, value)


def _activation(graph: Graph, base: str, dtype, shape) -> str:
    return graph.add_tensor(base, dtype, shape)


def _rewrite(graph: Graph, node: Node) -> list[Node] | None:
    if not is_onnx_domain(node.domain) or len(node.inputs) < 2:
        return None
    x, w = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    bias = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    out = graph.tensors[node.outputs[0]]
    if not w.is_const or x.is_const or np.dtype(x.dtype) != np.float32 or np.dtype(w.dtype) != np.float32:
        return None
    if bias is not None and (not bias.is_const or np.dtype(bias.dtype) != np.float32):
        return None
    sp = len(x.shape) - 2
    if not 1 <= sp <= 3 or x.size == 0 or out.size == 0:
        return None
    groups = int(node.attrs.get("group", 1))
    n, cin = x.shape[0], x.shape[1]
    k_sp = list(w.shape[2:])
    cout = out.shape[1]
    if groups < 1 or cin % groups or w.shape[0] != cin or w.shape[1] * groups != cout:
        return None
    strides = [int(s) for s in (node.attrs.get("strides") or [1] * sp)]
    dils = [int(d) for d in (node.attrs.get("dilations") or [1] * sp)]
    pads = _pads(node, list(x.shape[2:]), k_sp, list(out.shape[2:]), strides, dils)
    if pads is None:
        return None
    cig, cog, taps, pixels = cin // groups, cout // groups, math.prod(k_sp), math.prod(x.shape[2:])
    weights = w.value.reshape(groups, cig, cog * taps).transpose(0, 2, 1)  # [G, Cog * K, Cig]
    name = node.name or "ConvTranspose"
    if groups == 1:
        w_name = _const(graph, f"{name}.cols_weight", np.ascontiguousarray(weights[0]))
        x_shape, cols_shape = (n, cin, pixels), (n, cog * taps, pixels)
    else:
        w_name = _const(graph, f"{name}.cols_weight", np.ascontiguousarray(weights))
        x_shape, cols_shape = (n, groups, cig, pixels), (n, groups, cog * taps, pixels)
    x_flat = _activation(graph, f"{name}.x_flat", x.dtype, x_shape)
    cols = _activation(graph, f"{name}.cols", x.dtype, cols_shape)
    nodes = [Node("Reshape", f"{name}.flatten", [x.name, _const(graph, f"{name}.x_shape", np.array(x_shape, np.int64))], [x_flat]),
             Node("MatMul", f"{name}.gemm", [w_name, x_flat], [cols])]
    if groups > 1:
        merged = _activation(graph, f"{name}.cols_merged", x.dtype, (n, cout * taps, pixels))
        nodes.append(Node("Reshape", f"{name}.merge_groups",
                          [cols, _const(graph, f"{name}.cols_shape", np.array((n, cout * taps, pixels), np.int64))], [merged]))
        cols = merged
    image = out.name if bias is None else _activation(graph, f"{name}.image", out.dtype, out.shape)
    nodes.append(Node("Col2Im", f"{name}.col2im",
                      [cols, _const(graph, f"{name}.image_shape", np.array(out.shape[2:], np.int64)),
                       _const(graph, f"{name}.block_shape", np.array(k_sp, np.int64))],
                      [image], {"strides": strides, "dilations": dils, "pads": pads}, OUR_DOMAIN))
    if bias is not None:
        b_name = _const(graph, f"{name}.bias", bias.value.reshape(cout, *([1] * sp)).astype(np.float32))
        nodes.append(Node("Add", f"{name}.bias_add", [image, b_name], [out.name]))
    return nodes


@graph_pass(order=12)
def conv_transpose_as_gemm(graph: Graph) -> None:
    rewritten: list[Node] = []
    for node in graph.nodes:
        replacement = _rewrite(graph, node) if node.op_type == "ConvTranspose" else None
        rewritten.extend(replacement or [node])
    graph.nodes = rewritten
