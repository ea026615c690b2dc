"""The fusion passes that write a kernel's Epilogue (kernels/epilogue.py) to node.attrs[EPILOGUE_ATTR]: Conv and
BatchNormalization (residual Add, Relu / Clip / LeakyRelu), MatMul / Gemm (bias, residual, Relu), QLinearConv /
QLinearMatMul (a DequantizeLinear -> Relu -> QuantizeLinear as a floor or a table). The float activations a Conv or
BatchNormalization epilogue takes are the ops registered with `epilogue_activation` (OpSpec); `activation_of`
turns one into its Epilogue.

Conv: a residual Add and an activation (Relu, Clip with constant bounds, LeakyRelu) fuse into the Conv
that produces their input, so the conv kernel applies them as it stores its output.

First, Mul and Add by a constant that varies only along the output channels (an unfolded
BatchNormalization, as in the older model-zoo exports) fold into the Conv's constant weights and bias.
Then the patterns (each intermediate has exactly one consumer and is not a graph output):

    Conv -> Act                 Conv -> Add(., other)            Conv -> Add(., other) -> Act

(Sum with two operands counts as Add.)
The Add's other operand must have the conv output's shape and dtype (no broadcasting); the sum is
formed before the activation. The result is recorded on the Conv node:

    node.attrs[EPILOGUE_ATTR] = Epilogue(activation, params, residual)   (kernels/epilogue.py)

and a residual operand becomes the Conv's input 3 (input 2, the bias, is "" when the Conv has none),
so the planner sees it as an ordinary input whose life ends at the Conv. The Conv takes the last
fused node's output name; the fused nodes and the intermediates disappear from the graph. When the
residual is produced after the Conv, the Conv moves to the Add's place in the node order (its other
inputs are produced earlier still, and only the fused nodes read its output).

MatMul: MatMul + Add(constant bias along the last dim) -> MatMul with the bias applied in the kernel's epilogue.
PyTorch's Linear exports as MatMul followed by Add(bias) (bert_tiny, GPT-style models). When the
MatMul's output feeds only that Add, is not a graph output, and the other Add operand is a constant of
N (the last dim) or 1 elements whose leading dims are all 1 (so the Add does not broadcast the output
any further), the bias becomes the MatMul's third input
(ops/matmul.py adds it in the register-blocked kernels' epilogue, or initialises C with it on the
scalar path). The MatMul takes over the Add's output tensor; its old output is deleted.

Then a residual: MatMul (+ bias) followed by Add(an activation of the output's shape) takes the
activation as input 3 (fuse_matmul_residual); then a following Relu (after MatMul or Gemm) becomes
the Epilogue's activation (fuse_matmul_relu).

QLinear: QLinearConv / QLinearMatMul -> DequantizeLinear -> Relu -> QuantizeLinear -> the QLinear node alone.
onnxruntime.quantization's QOperator models keep Relu in float between a DequantizeLinear and a
QuantizeLinear. With scalar parameters the three nodes map each of the 256 int8/uint8 values to one
output value, so they fold into the QLinear node's requantization:
- same scale and zero point: Epilogue("relu_floor", (zp,)), since for v = q - zp (|v| <= 255)
  saturate(round(max(0, v * s) / s) + zp) = max(q, zp) (float32 v * s / s is within a few ulps of v);
- else Epilogue("lut", the 256 results) (index q - min), computed here as onnx.reference does
  (float32 (q - z1) * s1, max 0, / s2, round half to even, + z2, saturate).
kernels/integer.py requantize and kernels/qgemm.py requantize_vec apply them after requantizing; the three nodes and their two float tensors disappear.
Only when the intermediate tensors have one consumer each and are not graph outputs, the parameters are
build-time float32 / int8 / uint8 scalars and the output dtype is the QLinear node's.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, Tensor, is_onnx_domain
from ..kernels.epilogue import EPILOGUE_ATTR, Epilogue
from ..opspec import traits
from . import graph_pass
from .batchnorm import folds_exactly

def _scalar(graph: Graph, name: str) -> float | None | bool:
    """A constant scalar's value, None for an absent input, False when not a build-time scalar."""
    if not name:
        return None
    t = graph.tensors.get(name)
    if t is None or not t.is_const or t.value.size != 1:
        return False
    return float(np.asarray(t.value).reshape(()))


def activation_of(graph: Graph, node: Node) -> Epilogue | None:
    """The epilogue of an activation node (no residual), or None when it cannot be fused."""
    if node.op_type == "Relu":
        return Epilogue("relu")
    if node.op_type == "LeakyRelu":
        return Epilogue("leaky_relu", (float(node.attrs.get("alpha", 0.01)),))
    if node.op_type == "Clip":
        if graph.opset < 11 or (len(node.inputs) == 1 and ("min" in node.attrs or "max" in node.attrs)):
            lo, hi = node.attrs.get("min"), node.attrs.get("max")
            lo, hi = (None if lo is None else float(lo)), (None if hi is None else float(hi))
        else:
            lo = _scalar(graph, node.inputs[1]) if len(node.inputs) > 1 else None
            hi = _scalar(graph, node.inputs[2]) if len(node.inputs) > 2 else None
            if lo is False or hi is False:
                return None
        return Epilogue("clip", (lo, hi))
    return None


def _per_channel(graph: Graph, name: str, out_shape) -> np.ndarray | None:
    """A constant that broadcasts against the conv output varying only along dim 1, as (OC,) float64."""
    t = graph.tensors.get(name)
    if t is None or not t.is_const or np.dtype(t.dtype).kind != "f":
        return None
    value = np.asarray(t.value)
    rank = len(out_shape)
    if value.ndim > rank:
        return None
    full = value.reshape((1,) * (rank - value.ndim) + value.shape)
    for d, n in enumerate(full.shape):
        if n != 1 and (d != 1 or n != out_shape[1]):
            return None
    return np.broadcast_to(full.reshape(-1) if full.shape[1] != 1 else full.reshape(1), (out_shape[1],)).astype(np.float64)


def fold_channel_affine(graph: Graph) -> None:
    """Conv -> Mul(per-channel const) / Add(per-channel const) into the conv's weights and bias."""
    outputs = set(graph.outputs)
    changed = True
    while changed:
        changed = False
        producers, consumers = graph.producers(), graph.consumers()
        for node in graph.nodes:
            if node.op_type not in ("Mul", "Add") or len(node.inputs) != 2 or len(node.outputs) != 1:
                continue
            for pos in (0, 1):
                conv = producers.get(node.inputs[pos])
                if conv is None or conv.op_type != "Conv" or EPILOGUE_ATTR in conv.attrs or len(conv.outputs) != 1:
                    continue
                out = conv.outputs[0]
                if out in outputs or len(consumers.get(out, [])) != 1 or node.inputs[1 - pos] == out:
                    continue
                t_out = graph.tensors[out]
                if np.dtype(t_out.dtype).kind != "f" or tuple(graph.tensors[node.outputs[0]].shape) != tuple(t_out.shape):
                    continue
                c = _per_channel(graph, node.inputs[1 - pos], t_out.shape)
                w = graph.tensors[conv.inputs[1]]
                bias_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
                if c is None or not w.is_const or (bias_name is not None and not graph.tensors[bias_name].is_const):
                    continue
                bias = graph.tensors[bias_name].value.astype(np.float64) if bias_name else np.zeros(t_out.shape[1])
                weight = w.value
                with np.errstate(all="ignore"):
                    if node.op_type == "Mul":
                        weight = (weight.astype(np.float64) * c.reshape(-1, *([1] * (weight.ndim - 1)))).astype(weight.dtype)
                        bias = bias * c
                    else:
                        bias = bias + c
                if not folds_exactly(w.value, weight, c, bias):  # a NaN or infinite constant stays its own node
                    continue
                w_name = graph.unique_name(f"{conv.name}.affine_weight")
                b_name = graph.unique_name(f"{conv.name}.affine_bias")
                graph.tensors[w_name] = Tensor(w_name, weight.dtype, weight.shape, weight)
                b_value = bias.astype(weight.dtype)
                graph.tensors[b_name] = Tensor(b_name, b_value.dtype, b_value.shape, b_value)
                conv.inputs = [conv.inputs[0], w_name, b_name]
                final = node.outputs[0]
                del graph.tensors[out]
                conv.outputs = [final]
                graph.nodes = [n for n in graph.nodes if n is not node]
                changed = True
                break
            if changed:
                break


def fuse_norm_activation(graph: Graph) -> None:
    """BatchNormalization (constant statistics, one output) -> activation: the activation becomes the
    BN's epilogue (ops/norm.py applies it as it stores), as in DenseNet's pre-activation blocks."""
    outputs = set(graph.outputs)
    consumers = graph.consumers()
    drop = set()
    for node in graph.nodes:
        if (node.op_type != "BatchNormalization" or EPILOGUE_ATTR in node.attrs or len([o for o in node.outputs if o]) != 1
                or node.attrs.get("training_mode")
                or not all(n and graph.tensors[n].is_const for n in node.inputs[1:5])):
            continue
        out = node.outputs[0]
        users = consumers.get(out, [])
        if out in outputs or len(users) != 1 or np.dtype(graph.tensors[out].dtype).kind != "f":
            continue
        act_node = users[0]
        if not traits(act_node.op_type, graph.opset, act_node.domain).epilogue_activation or len(act_node.outputs) != 1 or act_node.inputs[0] != out:
            continue
        act = activation_of(graph, act_node)
        if act is None:
            continue
        node.attrs[EPILOGUE_ATTR] = act
        node.outputs = [act_node.outputs[0], *node.outputs[1:]]
        del graph.tensors[out]
        drop.add(id(act_node))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]


@graph_pass(order=30)
def fuse_conv_epilogue(graph: Graph) -> None:
    fold_channel_affine(graph)
    fuse_norm_activation(graph)
    outputs = set(graph.outputs)
    changed = True
    while changed:
        changed = False
        producers = graph.producers()
        consumers = graph.consumers()
        position = {id(n): i for i, n in enumerate(graph.nodes)}

        def sole_consumer(name: str) -> Node | None:
            users = consumers.get(name, [])
            if name in outputs or len(users) != 1 or len([n for n in users[0].inputs if n == name]) != 1:
                return None
            return users[0]

        for conv in graph.nodes:
            if conv.op_type != "Conv" or EPILOGUE_ATTR in conv.attrs or len(conv.outputs) != 1:
                continue
            out = conv.outputs[0]
            t_out = graph.tensors[out]
            if np.dtype(t_out.dtype).kind != "f":
                continue
            nxt = sole_consumer(out)
            if nxt is None:
                continue
            fused: list[Node] = []
            epilogue = Epilogue()
            residual = None
            if nxt.op_type in ("Add", "Sum") and len(nxt.inputs) == 2 and len(nxt.outputs) == 1:
                other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
                t_other = graph.tensors.get(other)
                rival = producers.get(other)
                later_conv = (rival is not None and rival.op_type == "Conv" and EPILOGUE_ATTR not in rival.attrs
                              and position[id(rival)] > position[id(conv)] and sole_consumer(other) is nxt)
                # when both operands are convs, the later one takes the add (nothing has to move)
                if not later_conv and (other and other != out and t_other is not None and tuple(t_other.shape) == tuple(t_out.shape)
                        and np.dtype(t_other.dtype) == np.dtype(t_out.dtype)
                        and tuple(graph.tensors[nxt.outputs[0]].shape) == tuple(t_out.shape)):
                    residual = other
                    epilogue = Epilogue(residual=True)
                    fused.append(nxt)
                    last = nxt.outputs[0]
                    nxt = sole_consumer(last)
            if nxt is not None and traits(nxt.op_type, graph.opset, nxt.domain).epilogue_activation and len(nxt.outputs) == 1:
                act = activation_of(graph, nxt)
                if act is not None:
                    epilogue = Epilogue(act.activation, act.params, epilogue.residual)
                    fused.append(nxt)
            if not fused:
                continue
            final = fused[-1].outputs[0]
            # intermediates: the conv's old output and every fused node's output but the last
            dead = [out] + [n.outputs[0] for n in fused[:-1]]
            inputs = list(conv.inputs) + [""] * (3 - len(conv.inputs))
            if residual is not None:
                inputs.append(residual)
            conv.inputs = inputs
            conv.outputs = [final]
            conv.attrs[EPILOGUE_ATTR] = epilogue
            for name in dead:
                graph.tensors.pop(name, None)
            # the conv must run after the residual's producer
            target = position[id(conv)]
            if residual is not None and residual in producers:
                target = max(target, position[id(producers[residual])])
            drop = {id(n) for n in fused}
            nodes = [n for n in graph.nodes if id(n) not in drop and n is not conv]
            before = sum(1 for n in graph.nodes[:target + 1] if id(n) not in drop and n is not conv)
            nodes.insert(before, conv)
            graph.nodes = nodes
            changed = True
            break


# -- MatMul / Gemm: bias, residual, Relu --------------------------------------------------------
def _bias_operand(graph: Graph, name: str, out_shape: tuple[int, ...], dtype) -> bool:
    t = graph.tensors.get(name)
    if t is None or not t.is_const or np.dtype(t.dtype) != np.dtype(dtype) or len(t.shape) > len(out_shape):
        return False
    if any(d != 1 for d in t.shape[:-1]):
        return False
    return t.size == 1 or (len(t.shape) >= 1 and t.shape[-1] == out_shape[-1])


@graph_pass(order=40)
def fuse_matmul_bias(graph: Graph) -> None:
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    drop = set()
    for node in graph.nodes:
        if node.op_type != "Add" or not is_onnx_domain(node.domain) or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        for side in (0, 1):
            mm_out, bias = node.inputs[side], node.inputs[1 - side]
            mm = producers.get(mm_out)
            if mm is None or mm.op_type != "MatMul" or not is_onnx_domain(mm.domain) or len(mm.inputs) != 2:
                continue
            if mm_out in outputs or len({id(u) for u in consumers.get(mm_out, [])}) != 1 or mm_out == bias:
                continue
            a, b, c = (graph.tensors[n] for n in (mm.inputs[0], mm.inputs[1], mm_out))
            out = graph.tensors[node.outputs[0]]
            if len(a.shape) < 2 or len(b.shape) < 2 or c.shape != out.shape or c.is_const:
                continue
            if not _bias_operand(graph, bias, c.shape, c.dtype):
                continue
            mm.inputs = [mm.inputs[0], mm.inputs[1], bias]
            mm.attrs["_fused_nodes"] = [mm.name, node.name]
            del graph.tensors[mm_out]
            mm.outputs = [node.outputs[0]]
            drop.add(id(node))
            break
    if drop:
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    fuse_matmul_residual(graph)
    fuse_matmul_relu(graph)


def fuse_matmul_residual(graph: Graph) -> None:
    """MatMul (+ bias) followed by Add(activation of the same shape and dtype): the residual joins the
    MatMul as input 3 (input 2 is the bias or ""), added in the epilogue. The MatMul moves to the Add's
    place in the node order, so a residual computed between the two is ready."""
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    moved: dict[int, object] = {}
    for node in graph.nodes:
        if node.op_type != "Add" or not is_onnx_domain(node.domain) or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        for side in (0, 1):
            mm_out, res = node.inputs[side], node.inputs[1 - side]
            mm = producers.get(mm_out)
            if mm is None or mm.op_type != "MatMul" or not is_onnx_domain(mm.domain) or len(mm.inputs) > 3 or id(mm) in moved:
                continue
            if mm_out in outputs or len({id(u) for u in consumers.get(mm_out, [])}) != 1 or mm_out == res:
                continue
            a, b, c = (graph.tensors[n] for n in (mm.inputs[0], mm.inputs[1], mm_out))
            r, out = graph.tensors[res], graph.tensors[node.outputs[0]]
            if len(a.shape) < 2 or len(b.shape) < 2 or r.is_const or c.is_const:
                continue
            if not (r.shape == c.shape == out.shape and np.dtype(r.dtype) == np.dtype(c.dtype) == np.dtype(out.dtype)):
                continue
            bias = mm.inputs[2] if len(mm.inputs) > 2 else ""
            mm.inputs = [mm.inputs[0], mm.inputs[1], bias, res]
            mm.attrs[EPILOGUE_ATTR] = replace(mm.attrs.get(EPILOGUE_ATTR, Epilogue()), residual=True)
            mm.attrs["_fused_nodes"] = list(mm.attrs.get("_fused_nodes", [mm.name])) + [node.name]
            del graph.tensors[mm_out]
            mm.outputs = [node.outputs[0]]
            moved[id(mm)] = node
            break
    if moved:
        at_add = {id(add): mm for mm_id, add in moved.items() for mm in graph.nodes if id(mm) == mm_id}
        graph.nodes = [at_add.get(id(n), n) for n in graph.nodes if id(n) not in moved]


def fuse_matmul_relu(graph: Graph) -> None:
    """MatMul/Gemm (after bias and residual) followed by Relu: the Epilogue's activation "relu", applied last in
    the epilogue (max with 0, as the Relu kernel computes it)."""
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    drop = set()
    for node in graph.nodes:
        if node.op_type != "Relu" or not is_onnx_domain(node.domain) or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        src = node.inputs[0]
        mm = producers.get(src)
        if mm is None or mm.op_type not in ("MatMul", "Gemm") or not is_onnx_domain(mm.domain) or mm.attrs.get(EPILOGUE_ATTR, Epilogue()).activation:
            continue
        if src in outputs or len({id(u) for u in consumers.get(src, [])}) != 1 or len(mm.outputs) != 1:
            continue
        if graph.tensors[src].shape != graph.tensors[node.outputs[0]].shape or graph.tensors[src].is_const:
            continue
        if mm.op_type == "MatMul" and any(len(graph.tensors[n].shape) < 2 for n in mm.inputs[:2]):
            continue
        mm.attrs[EPILOGUE_ATTR] = replace(mm.attrs.get(EPILOGUE_ATTR, Epilogue()), activation="relu")
        mm.attrs["_fused_nodes"] = list(mm.attrs.get("_fused_nodes", [mm.name])) + [node.name]
        del graph.tensors[src]
        mm.outputs = [node.outputs[0]]
        drop.add(id(node))
    if drop:
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]


# -- QLinearConv / QLinearMatMul: DequantizeLinear -> Relu -> QuantizeLinear ----------------------
PRODUCERS = ("QLinearConv", "QLinearMatMul")


def _quant_scalar(graph: Graph, name: str, dtype=None):
    t = graph.tensors.get(name) if name else None
    if t is None or not t.is_const or t.size != 1 or (dtype is not None and np.dtype(t.dtype) != np.dtype(dtype)):
        return None
    return np.asarray(t.value).reshape(-1)[0]


def relu_table(dtype, s1, z1, s2, z2) -> np.ndarray:
    """QuantizeLinear(Relu(DequantizeLinear(q, s1, z1)), s2, z2) for every q of dtype, as onnx.reference."""
    info = np.iinfo(dtype)
    q = np.arange(info.min, info.max + 1).astype(dtype)
    with np.errstate(all="ignore"):
        y = (q.astype(np.float32) - np.asarray(z1, dtype).astype(np.float32)) * np.float32(s1)
        y = np.maximum(y, np.float32(0))
        xi = np.rint(y / np.float32(s2)).astype(np.float64) + float(z2)  # clip before any integer cast
    return np.clip(xi, info.min, info.max).astype(dtype)


@graph_pass(order=35)
def fold_qdq_relu(graph: Graph) -> None:
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = set(graph.outputs)

    def single(name, node):
        users = consumers.get(name, [])
        return name not in outputs and len(users) == 1 and users[0] is node and list(node.inputs).count(name) == 1

    drop = set()
    for q in graph.nodes:
        if q.op_type != "QuantizeLinear" or not is_onnx_domain(q.domain) or len(q.inputs) < 3 or len(q.outputs) != 1:
            continue
        relu = producers.get(q.inputs[0])
        if relu is None or relu.op_type != "Relu" or not is_onnx_domain(relu.domain) or not single(q.inputs[0], q):
            continue
        dq = producers.get(relu.inputs[0])
        if dq is None or dq.op_type != "DequantizeLinear" or not is_onnx_domain(dq.domain) or len(dq.inputs) < 3 \
                or not single(relu.inputs[0], relu):
            continue
        node = producers.get(dq.inputs[0])
        if node is None or node.op_type not in PRODUCERS or not is_onnx_domain(node.domain) or EPILOGUE_ATTR in node.attrs \
                or not single(dq.inputs[0], dq):
            continue
        qt = graph.tensors[dq.inputs[0]]
        if np.dtype(qt.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)) or np.dtype(graph.tensors[q.outputs[0]].dtype) != np.dtype(qt.dtype):
            continue
        if np.dtype(graph.tensors[relu.inputs[0]].dtype) != np.dtype(np.float32):
            continue
        s1, s2 = _quant_scalar(graph, dq.inputs[1], np.float32), _quant_scalar(graph, q.inputs[1], np.float32)
        z1, z2 = _quant_scalar(graph, dq.inputs[2], qt.dtype), _quant_scalar(graph, q.inputs[2], qt.dtype)
        if s1 is None or s2 is None or z1 is None or z2 is None or not (np.isfinite(s1) and np.isfinite(s2) and s2 != 0):
            continue
        if s1 == s2 and z1 == z2 and s1 > 0:
            node.attrs[EPILOGUE_ATTR] = Epilogue("relu_floor", (int(z1),))
        else:
            node.attrs[EPILOGUE_ATTR] = Epilogue("lut", tuple(int(v) for v in relu_table(qt.dtype, np.float32(s1), z1, np.float32(s2), z2)))
        node.attrs["_fused_nodes"] = [*node.attrs.get("_fused_nodes", [node.name]), dq.name, relu.name, q.name]
        for name in (dq.inputs[0], relu.inputs[0], q.inputs[0]):
            graph.tensors.pop(name, None)
        node.outputs = [q.outputs[0]]
        drop.update({id(dq), id(relu), id(q)})
    if drop:
        graph.nodes = [n for n in graph.nodes if id(n) not in drop]
