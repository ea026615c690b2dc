"""Conv over 3 spatial dims (Conv3d) with constant weights -> one 2-D Conv per output depth.

Output depth plane od reads the input planes id = od * s - pad + t * dil for the kernel taps t that land
inside the input. Those planes, sliced out as [N, C, taps, H, W] and viewed as [N, C * taps, H, W],
convolve with the weights of the same taps viewed as [Cout, Cin/g * taps, kh, kw] (channel c, tap t at
c * taps + t on both sides, so groups stay contiguous): a 2-D Conv for the blocked kernel (ops/conv/)
instead of the generic N-D nest. The planes are reshaped to [N, Cout, 1, Ho, Wo] and concatenated along
depth. Rewritten for float32 with constant weights (and bias), pads given or from auto_pad. The Slices
are in the input form (Slice-10 on, with a step for a dilated depth) whatever the model's opset: the
Slice lowering reads the form from the node.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, is_onnx_domain
from . import graph_pass


def _pads(node: Node, size: list[int], kernel: list[int], strides: list[int], dils: list[int], out: list[int]) -> list[int] | None:
    sp = len(size)
    mode = node.attrs.get("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode in ("NOTSET", "") and node.attrs.get("pads") is not None:
        return [int(p) for p in node.attrs["pads"]]
    if mode in ("NOTSET", "", "VALID"):
        return [0] * (2 * sp)
    begin, end = [], []
    for d in range(sp):
        total = max(0, (out[d] - 1) * strides[d] + (kernel[d] - 1) * dils[d] + 1 - size[d])
        small, large = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else large)
        end.append(large if mode == "SAME_UPPER" else small)
    return begin + end


def _rewrite(graph: Graph, node: Node) -> list[Node] | None:
    if not is_onnx_domain(node.domain) or len(node.inputs) < 2 or len(node.outputs) != 1:
        return None
    x, w = graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    bias = graph.tensors[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    out = graph.tensors[node.outputs[0]]
    if len(x.shape) != 5 or not w.is_const or x.is_const or np.dtype(x.dtype) != np.float32 or np.dtype(w.dtype) != np.float32:
        return None
    if (bias is not None and not bias.is_const) or x.size == 0 or out.size == 0:
        return None
    groups = int(node.attrs.get("group", 1))
    kernel = list(w.shape[2:])
    strides = [int(s) for s in (node.attrs.get("strides") or [1, 1, 1])]
    dils = [int(d) for d in (node.attrs.get("dilations") or [1, 1, 1])]
    pads = _pads(node, list(x.shape[2:]), kernel, strides, dils, list(out.shape[2:]))
    if pads is None or len(pads) != 6 or min(pads) < 0:
        return None
    n, c, depth = x.shape[:3]
    co, cig, kd = w.shape[:3]
    base = node.name or "Conv3d"

    def tensor(suffix: str, shape, value=None) -> str:
        return graph.add_tensor(f"{base}.{suffix}", np.float32, shape, value)

    weights: dict[tuple[int, ...], str] = {}
    nodes, planes = [], []
    conv_inputs_tail = [node.inputs[2]] if bias is not None else []
    plane_shape = (n, co, 1, *out.shape[3:])
    for od in range(out.shape[2]):
        taps = [t for t in range(kd) if 0 <= od * strides[0] - pads[0] + t * dils[0] < depth]
        plane = tensor(f"d{od}", plane_shape)
        planes.append(plane)
        if not taps:  # only padding under the kernel: the bias alone
            value = np.zeros(plane_shape, np.float32) + (0 if bias is None else bias.value.reshape(1, co, 1, 1, 1))
            graph.tensors[plane].value = value.astype(np.float32)
            continue
        key = tuple(taps)
        if key not in weights:
            weights[key] = tensor(f"w{'_'.join(map(str, taps))}", (co, cig * len(taps), *kernel[1:]),
                                  np.ascontiguousarray(w.value[:, :, taps]).reshape(co, cig * len(taps), *kernel[1:]))
        first = od * strides[0] - pads[0] + taps[0] * dils[0]
        sliced = tensor(f"x{od}", (n, c, len(taps), *x.shape[3:]))
        nodes.append(Node("Slice", f"{base}.slice{od}",
                          [x.name, tensor(f"s{od}", (1,), np.array([first], np.int64)),
                           tensor(f"e{od}", (1,), np.array([first + (len(taps) - 1) * dils[0] + 1], np.int64)),
                           tensor(f"a{od}", (1,), np.array([2], np.int64)), tensor(f"st{od}", (1,), np.array([dils[0]], np.int64))],
                          [sliced]))
        folded = tensor(f"xc{od}", (n, c * len(taps), *x.shape[3:]))
        nodes.append(Node("Reshape", f"{base}.fold{od}", [sliced, tensor(f"fs{od}", (4,), np.array((n, c * len(taps), *x.shape[3:]), np.int64))],
                          [folded]))
        conv_out = tensor(f"c{od}", (n, co, *out.shape[3:]))
        nodes.append(Node("Conv", f"{base}.plane{od}", [folded, weights[key], *conv_inputs_tail], [conv_out],
                          {"kernel_shape": kernel[1:], "strides": strides[1:], "dilations": dils[1:],
                           "pads": [pads[1], pads[2], pads[4], pads[5]], "group": groups}))
        nodes.append(Node("Reshape", f"{base}.lift{od}", [conv_out, tensor(f"ls{od}", (5,), np.array(plane_shape, np.int64))], [plane]))
    nodes.append(Node("Concat", f"{base}.depth", planes, [out.name], {"axis": 2}))
    return nodes


@graph_pass(order=9)
def conv3d_as_planes(graph: Graph) -> None:
    rewritten: list[Node] = []
    for node in graph.nodes:
        replacement = _rewrite(graph, node) if node.op_type == "Conv" else None
        rewritten.extend(replacement or [node])
    graph.nodes = rewritten
