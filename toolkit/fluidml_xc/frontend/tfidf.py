"""TfIdfVectorizer over string tokens (`pool_strings`), expanded at import into integer ids and the integer
TfIdfVectorizer (ops/misc.py lowers `pool_int64s`): an ai.onnx.ml CategoryMapper (in every ai.onnx.ml opset, where
LabelEncoder's string keys need opset 2) maps each token onto the index of
its first place among the pool's distinct tokens (a token in no n-gram onto -1, which matches none), and the pool
becomes those ids. N-grams match the same positions either way, so the counts and weights are the same.

The CategoryMapper is a string op (ops/string_maps.py, a binary search per token); after a Tokenizer it is fused
into the tokenizer's kernel (passes/token_ids.py), so the tokens are never stored as strings.
"""
from __future__ import annotations

import onnx

from .builder import NodeBuilder, attr, attrs
from .expanders import Scope, expands


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
    bld.add("TfIdfVectorizer", [token_ids], [node.output[0]], pool_int64s=ids, **kept)
    return bld.nodes
