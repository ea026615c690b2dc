"""Fold BatchNormalization into a preceding Conv with constant weights."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Tensor
from . import graph_pass


@graph_pass(order=10)
def fold_batchnorm_into_conv(graph: Graph) -> None:
    producers = graph.producers()
    consumers = graph.consumers()
    kept = []
    for node in graph.nodes:
        if (node.op_type == "BatchNormalization" and len([o for o in node.outputs if o]) == 1
                and not node.attrs.get("training_mode")):
            conv = producers.get(node.inputs[0])
            params = [graph.tensors[n] for n in node.inputs[1:5]]
            if (conv is not None and conv.op_type == "Conv" and len(consumers.get(node.inputs[0], [])) == 1
                    and node.inputs[0] not in graph.outputs and all(p.is_const for p in params)
                    and graph.tensors[conv.inputs[1]].is_const
                    and (len(conv.inputs) < 3 or not conv.inputs[2] or graph.tensors[conv.inputs[2]].is_const)):
                scale, bias, mean, var = (p.value.astype(np.float64) for p in params)
                factor = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
                weight = graph.tensors[conv.inputs[1]].value
                old_bias = graph.tensors[conv.inputs[2]].value if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(weight.shape[0])
                new_w = (weight.astype(np.float64) * factor.reshape(-1, *([1] * (weight.ndim - 1)))).astype(weight.dtype)
                new_b = ((old_bias.astype(np.float64) - mean) * factor + bias).astype(weight.dtype)
                w_name, b_name = f"{conv.name}.bn_weight", f"{conv.name}.bn_bias"
                graph.tensors[w_name] = Tensor(w_name, new_w.dtype, new_w.shape, new_w)
                graph.tensors[b_name] = Tensor(b_name, new_b.dtype, new_b.shape, new_b)
                conv.inputs = [conv.inputs[0], w_name, b_name]
                out = node.outputs[0]
                graph.tensors[out] = Tensor(out, graph.tensors[conv.outputs[0]].dtype, graph.tensors[out].shape)
                del graph.tensors[conv.outputs[0]]
                conv.outputs = [out]
                continue
        kept.append(node)
    graph.nodes = kept

