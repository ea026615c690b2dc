"""TfIdfVectorizer over string tokens (`pool_strings`), expanded at import into integer ids and the integer
TfIdfVectorizer (ops/misc.py lowers `pool_int64s`): an ai.onnx.ml LabelEncoder maps each token onto the index of
its first place among the pool's distinct tokens (a token in no n-gram onto -1, which matches none), and the pool
becomes those ids. N-grams match the same positions either way, so the counts and weights are the same.

The LabelEncoder over a string tensor is the frontend's string-tensor work: until it lowers, such a model stops
there with the string-tensor error; nothing here changes when it does.
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
    token_ids = bld.add("LabelEncoder", [node.input[0]], domain="ai.onnx.ml", keys_strings=list(vocabulary),
                        values_int64s=list(range(len(vocabulary))), default_int64=-1)[0]
    kept = {k: v for k, v in attrs(node).items() if k != "pool_strings"}
    bld.add("TfIdfVectorizer", [token_ids], [node.output[0]], pool_int64s=ids, **kept)
    return bld.nodes
