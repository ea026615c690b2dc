"""ConvTranspose with constant weights -> Conv (stride 1) or a 1x1 Conv + Col2Im (+ bias Add).

At stride 1 a ConvTranspose is a Conv of the same input with the kernel flipped, input and output channels
swapped per group and pads d * (k - 1) - pad (when no pad exceeds d * (k - 1)): it runs in the blocked Conv
kernel with no column buffer.

Otherwise every input pixel i adds x[ci, i] * w[ci, co, t] into output o = i * s - pad + t * d; that is the
1x1 convolution cols[(co, t), i] = sum_ci w[ci, co, t] * x[ci, i] followed by Col2Im, which adds column entry
((co, t), i) into image position i * s - pad + t * d with the same strides, dilations and pads. So the
multiply-adds run in the blocked Conv kernel (a group-G 1x1 Conv for groups; a [G, Cog * K, Cig] batched
MatMul for 3 spatial dims, whose Convs become slices in an earlier pass) and only the scatter-add is left to
Col2Im (memory-bound).

Rewritten when W is a float32 constant, 1 to 3 spatial dims, pads >= 0 and every output_padding is
below its stride (then Col2Im's block count equals the input's extent); the node otherwise keeps the
direct scatter lowering (ops/conv/transpose.py). Col2Im is emitted in the "fluidml" domain, so the rewrite
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
    name = node.name or "ConvTranspose"
    conv_pads = [d * (k - 1) - p for d, k, p in zip(dils * 2, k_sp * 2, pads)]
    if sp <= 2 and all(s == 1 for s in strides) and min(conv_pads) >= 0:
        flipped = w.value.reshape(groups, cig, cog, *k_sp).swapaxes(1, 2)[(..., *[slice(None, None, -1)] * sp)]
        inputs = [x.name, _const(graph, f"{name}.conv_weight", np.ascontiguousarray(flipped.reshape(cout, cig, *k_sp)))]
        if bias is not None:
            inputs.append(bias.name)
        return [Node("Conv", f"{name}.conv", inputs, [out.name],
                     {"kernel_shape": k_sp, "strides": strides, "dilations": dils, "pads": conv_pads, "group": groups})]
    weights = w.value.reshape(groups, cig, cog * taps).transpose(0, 2, 1)  # [G, Cog * K, Cig]
    cols_of = _cols_conv if sp <= 2 else _cols_matmul
    nodes, cols = cols_of(graph, name, x, weights, (n, cout * taps, pixels))
    image = out.name if bias is None else _activation(graph, f"{name}.image", out.dtype, out.shape)
    nodes.append(Node("Col2Im", f"{name}.col2im",
                      [cols, _const(graph, f"{name}.image_shape", np.array(out.shape[2:], np.int64)),
                       _const(graph, f"{name}.block_shape", np.array(k_sp, np.int64))],
                      [image], {"strides": strides, "dilations": dils, "pads": pads}, OUR_DOMAIN))
    if bias is not None:
        b_name = _const(graph, f"{name}.bias", bias.value.reshape(cout, *([1] * sp)).astype(np.float32))
        nodes.append(Node("Add", f"{name}.bias_add", [image, b_name], [out.name]))
    return nodes


def _cols_conv(graph: Graph, name: str, x, weights: np.ndarray, cols_shape) -> tuple[list[Node], str]:
    """The column buffer [N, C * K, L] as a group-G 1x1 Conv of x (weights [G, Cog * K, Cig]) viewed flat."""
    sp, groups = len(x.shape) - 2, weights.shape[0]
    rows = weights.shape[0] * weights.shape[1]
    w_name = _const(graph, f"{name}.cols_weight", np.ascontiguousarray(weights.reshape(rows, weights.shape[2], *[1] * sp)))
    image = _activation(graph, f"{name}.cols_image", x.dtype, (x.shape[0], rows, *x.shape[2:]))
    cols = _activation(graph, f"{name}.cols", x.dtype, cols_shape)
    return [Node("Conv", f"{name}.gemm", [x.name, w_name], [image], {"kernel_shape": [1] * sp, "group": groups}),
            Node("Reshape", f"{name}.flatten", [image, _const(graph, f"{name}.cols_shape", np.array(cols_shape, np.int64))],
                 [cols])], cols


def _cols_matmul(graph: Graph, name: str, x, weights: np.ndarray, cols_shape) -> tuple[list[Node], str]:
    """The column buffer [N, C * K, L] as a (batched, one batch per group) MatMul of weights [G, Cog * K, Cig]
    and x viewed as [N, G, Cig, L]."""
    n, groups, (rows, cig) = x.shape[0], weights.shape[0], weights.shape[1:]
    pixels = cols_shape[2]
    if groups == 1:
        w_value, x_shape, shape = weights[0], (n, cig, pixels), cols_shape
    else:
        w_value, x_shape, shape = weights, (n, groups, cig, pixels), (n, groups, rows, pixels)
    w_name = _const(graph, f"{name}.cols_weight", np.ascontiguousarray(w_value))
    x_flat = _activation(graph, f"{name}.x_flat", x.dtype, x_shape)
    cols = _activation(graph, f"{name}.cols", x.dtype, shape)
    nodes = [Node("Reshape", f"{name}.flatten", [x.name, _const(graph, f"{name}.x_shape", np.array(x_shape, np.int64))], [x_flat]),
             Node("MatMul", f"{name}.gemm", [w_name, x_flat], [cols])]
    if groups > 1:
        merged = _activation(graph, f"{name}.cols_merged", x.dtype, cols_shape)
        nodes.append(Node("Reshape", f"{name}.merge_groups",
                          [cols, _const(graph, f"{name}.cols_shape", np.array(cols_shape, np.int64))], [merged]))
        cols = merged
    return nodes, cols


@graph_pass(order=12)
def conv_transpose_as_gemm(graph: Graph) -> None:
    rewritten: list[Node] = []
    for node in graph.nodes:
        replacement = _rewrite(graph, node) if node.op_type == "ConvTranspose" else None
        rewritten.extend(replacement or [node])
    graph.nodes = rewritten
