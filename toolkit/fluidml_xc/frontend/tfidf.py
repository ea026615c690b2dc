"""TfIdfVectorizer over string tokens (`pool_strings`), expanded at import: an ai.onnx.ml CategoryMapper (in every
ai.onnx.ml opset, where LabelEncoder's string keys need opset 2) maps each token onto the index of its first place
among the pool's distinct tokens (a token in no n-gram onto -1, which matches none), and our TfIdfIds
(ops/tfidf_ids.py) counts the pool's n-grams over those dense ids, each n-gram one int64 key found by binary search.
N-grams match the same positions either way, so the counts and weights are TfIdfVectorizer's.

The CategoryMapper is a string op (ops/string_maps.py, a binary search per token); after a Tokenizer it is fused
into the tokenizer's kernel (passes/token_ids.py), so the tokens are never stored as strings.
"""
from __future__ import annotations

import numpy as np
import onnx

from ..opspec import OUR_DOMAIN
from .builder import NodeBuilder, attr, attrs
from .expanders import Scope, expands
from .ml_ops import OUTPUT_SHAPES

COUNTS = "TfIdfIds"


@expands("", "TfIdfVectorizer")
def expand_string_tfidf(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    pool = attr(node, "pool_strings", None)
    if not pool or not node.input:
        return None
    tokens = [t.decode() if isinstance(t, bytes) else str(t) for t in pool]
    vocabulary: dict[str, int] = {}
    ids = [vocabulary.setdefault(t, len(vocabulary)) for t in tokens]
    bld = NodeBuilder(node_name, scope.opset)
    token_ids = bld.add("CategoryMapper", [node.input[0]], domain="ai.onnx.ml", cats_strings=list(vocabulary),
                        cats_int64s=list(range(len(vocabulary))), default_int64=-1)[0]
    kept = {k: v for k, v in attrs(node).items() if k != "pool_strings"}
    bld.add(COUNTS, [token_ids], [node.output[0]], domain=OUR_DOMAIN, pool_int64s=ids, vocabulary=len(vocabulary),
            **kept)
    return bld.nodes


def counts_shapes(node: onnx.NodeProto, inputs: list) -> dict:
    """TfIdfIds: float32 [rows, columns] ([columns] for a rank-1 input), as TfIdfVectorizer."""
    x = inputs[0]
    columns = max((int(i) for i in attr(node, "ngram_indexes", None) or []), default=-1) + 1
    if x is None or len(x.shape) not in (1, 2):
        return {}
    return {node.output[0]: (np.dtype(np.float32), (x.shape[0], columns) if len(x.shape) == 2 else (columns,))}


OUTPUT_SHAPES[(OUR_DOMAIN, COUNTS)] = counts_shapes
