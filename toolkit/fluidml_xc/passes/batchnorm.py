"""Fold BatchNormalization into a preceding Conv with constant weights, when the fold is exact for non-finite
values too: a NaN or infinite scale factor or bias would turn the BatchNormalization's per-element
(x - mean) * factor into a sum of infinities (NaN) inside the conv, so such a BatchNormalization stays a node."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Tensor
from . import graph_pass


def folds_exactly(weight: np.ndarray, new_w: np.ndarray, factor: np.ndarray, new_b: np.ndarray) -> bool:
    """Folding a per-channel factor and bias into conv weights keeps NaN and infinities where they were: the
    factor and the new bias are finite, no finite weight overflowed and no nonzero one underflowed to zero (an
    infinite input times it would become NaN)."""
    with np.errstate(all="ignore"):
        return bool(np.isfinite(factor).all() and np.isfinite(new_b).all()
                    and (np.isfinite(new_w) == np.isfinite(weight)).all() and ((new_w == 0) == (weight == 0)).all())


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
                with np.errstate(all="ignore"):
                    factor = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
                    weight = graph.tensors[conv.inputs[1]].value
                    old_bias = graph.tensors[conv.inputs[2]].value if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(weight.shape[0])
                    new_w = (weight.astype(np.float64) * factor.reshape(-1, *([1] * (weight.ndim - 1)))).astype(weight.dtype)
                    new_b = ((old_bias.astype(np.float64) - mean) * factor + bias).astype(weight.dtype)
                if not folds_exactly(weight, new_w, factor, new_b):
                    kept.append(node)
                    continue
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

