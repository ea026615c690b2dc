"""`If` nodes whose condition is known once inputs are bound (`quantize --bind`), replaced in the ONNX model by
the branch taken, so ONNX Runtime's quantizer never infers the branch that does not fit the bound inputs' shapes.
The frontend does the same inside `build` (frontend/subgraphs.expand_if); this is its ONNX-to-ONNX form."""
from __future__ import annotations

import onnx
from onnx import helper

from ..frontend.bind_hints import constant_condition
from ..frontend.domains import Opsets
from ..frontend.subgraphs import taken_branch
from ..ir import is_onnx_domain


def _inline(model: onnx.ModelProto, index: int, node: onnx.NodeProto, taken: bool) -> None:
    """Node `index` (an If) replaced by the nodes of its branch taken; the branch's initializers become the model's."""
    branch = next(helper.get_attribute_value(a) for a in node.attribute
                  if a.name == ("then_branch" if taken else "else_branch"))
    nodes = taken_branch(node, node.name or f"If_{index}", Opsets.of_model(model).default, taken)
    n_inits = len(branch.initializer)
    for constant in nodes[:n_inits]:
        init = onnx.TensorProto()
        init.CopyFrom(constant.attribute[0].t)
        init.name = constant.output[0]
        model.graph.initializer.append(init)
    kept = list(model.graph.node)
    kept[index:index + 1] = nodes[n_inits:]
    del model.graph.node[:]
    model.graph.node.extend(kept)


def fold_constant_ifs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose top-level Ifs with a condition computed from constants only are their branch taken
    (repeatedly: an If inside a branch kept is then top-level)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    changed = True
    while changed:
        changed = False
        for index, node in enumerate(out.graph.node):
            if node.op_type != "If" or not is_onnx_domain(node.domain):
                continue
            taken = constant_condition(out, node.input[0])
            if taken is not None:
                _inline(out, index, node, taken)
                changed = True
                break
    return out
