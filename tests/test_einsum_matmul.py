"""Einsum equations that are matrix products run as MatMul (passes/einsum_matmul.py): outputs against
numpy's einsum, the rewrite applied where it should be and not elsewhere."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.run.backend import compile_model
from fluidml_xc.pipeline import import_graph

CASES = [  # equation, shapes, constant operand index or None, rewritten
    ("bij,bjk->bik", [(3, 5, 4), (3, 4, 6)], None, True),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)], None, True),
    ("bhqk,bhkd->bqhd", [(2, 3, 5, 7), (2, 3, 7, 8)], None, True),
    ("ij,jk->ik", [(5, 4), (4, 6)], 1, True),
    ("ij,kj->ik", [(5, 4), (6, 4)], 1, True),
    ("bsd,dhk->bshk", [(2, 5, 8), (8, 3, 4)], 1, True),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)], None, True),
    ("ij,ij->i", [(5, 4), (5, 4)], None, True),
    ("i,j->ij", [(5,), (4,)], None, False),
    ("ii,ij->ij", [(4, 4), (4, 3)], None, False),
    ("ij,jk", [(5, 4), (4, 6)], None, True),
]


@pytest.mark.parametrize("equation,shapes,const,rewritten", CASES)
def test_einsum_as_matmul(equation, shapes, const, rewritten):
    rng = np.random.default_rng(len(equation))
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    names = ["a", "b"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for i, (n, a) in enumerate(zip(names, arrays)) if i != const]
    inits = [numpy_helper.from_array(arrays[const], names[const])] if const is not None else []
    graph = helper.make_graph([helper.make_node("Einsum", names, ["y"], equation=equation)], "e", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ops = [n.op_type for n in import_graph(model).nodes]
    assert ("Einsum" not in ops) == rewritten, ops
    feeds = {n: a for i, (n, a) in enumerate(zip(names, arrays)) if i != const}
    got = compile_model(model)(feeds)[0]
    np.testing.assert_allclose(got, np.einsum(equation if "->" in equation else equation, *arrays), rtol=1e-5, atol=1e-5)
