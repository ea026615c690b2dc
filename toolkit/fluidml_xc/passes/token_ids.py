"""Tokenizer -> views -> string-keyed LabelEncoder or CategoryMapper becomes one TokenIds node (ops/tokenizer.py): each token's
vocabulary id is looked up as the token is found, so no string tensor of tokens ([rows, bound] slots of
--max-string-bytes each) is written. This is the chain skl2onnx's CountVectorizer / TfidfVectorizer export becomes
(frontend/tfidf.py turns TfIdfVectorizer's `pool_strings` into that CategoryMapper and integer ids).

Applied when each tensor of the chain has one consumer and is no graph output; the views (Flatten, Reshape,
Identity, Squeeze, Unsqueeze) then move int64 ids instead of strings, and the map becomes an Identity.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir import Graph, Node, Tensor
from ..opspec import OUR_DOMAIN
from ..ops.tokenizer import MS_DOMAIN, tokenizer_spec
from ..strings import encode
from . import graph_pass

VIEWS = frozenset({"Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze"})
ML_DOMAIN = "ai.onnx.ml"


ENCODERS = {"LabelEncoder": ("keys_strings", "values_int64s"), "CategoryMapper": ("cats_strings", "cats_int64s")}
"""String -> int64 maps: their key and value attributes (default_int64 either way)."""


def _encoder(node: Node, name: str) -> bool:
    """A LabelEncoder or CategoryMapper from string keys to int64 values reading `name`."""
    a, names = node.attrs, ENCODERS.get(node.op_type)
    return (names is not None and node.domain == ML_DOMAIN and node.inputs[:1] == [name]
            and bool(a.get(names[0])) and bool(a.get(names[1])) and a.get("default_tensor") is None)


def _chain(graph: Graph, consumers: dict, tokenizer: Node) -> tuple[list[Node], Node] | None:
    """(the views, the LabelEncoder) after a Tokenizer, or None."""
    views, name = [], tokenizer.outputs[0]
    while name and name not in graph.outputs:
        users = consumers.get(name, [])
        if len(users) != 1:
            return None
        user = users[0]
        if _encoder(user, name):
            return views, user
        if user.op_type not in VIEWS or user.domain not in ("", "ai.onnx") or user.inputs[0] != name:
            return None
        views.append(user)
        name = user.outputs[0]
    return None


def _encoders_after(graph: Graph, consumers: dict, tokenizer: Node) -> list[Node]:
    """Every string -> int64 map the Tokenizer's tokens reach through views, whatever else reads them."""
    found, names = [], [tokenizer.outputs[0]]
    while names:
        name = names.pop()
        for user in consumers.get(name, []):
            if _encoder(user, name):
                found.append(user)
            elif user.op_type in VIEWS and user.domain in ("", "ai.onnx") and user.inputs[0] == name:
                names.append(user.outputs[0])
    return found


def _check_pad(tokenizer: Node, pad: bytes, encoder: Node) -> None:
    """Our rows carry more padding than ONNX Runtime's (a build-time bound, not the batch's most tokens), so the
    pad must map to no id (-1) that a count after the map could see."""
    key_attr, value_attr = ENCODERS[encoder.op_type]
    keys = [encode(str(v)) for v in encoder.attrs[key_attr]]
    values = [int(v) for v in encoder.attrs[value_attr]]
    pad_id = values[keys.index(pad)] if pad in keys else int(encoder.attrs.get("default_int64", -1))
    if pad_id >= 0:
        raise InputError(f"node {tokenizer.name!r} (Tokenizer): its pad_value {pad.decode(errors='replace')!r} maps to "
                         f"id {pad_id} of {encoder.name!r}: its count would depend on the batch's longest row (ONNX "
                         "Runtime), which a build-time bound does not know; export with a pad_value outside the "
                         "vocabulary and default_int64 -1")


def _as_ids(graph: Graph, name: str) -> None:
    t = graph.tensors[name]
    graph.tensors[name] = Tensor(name, np.dtype(np.int64), t.shape)


@graph_pass(order=4)
def fuse_token_ids(graph: Graph) -> None:
    consumers = graph.consumers()
    for node in graph.nodes:
        if node.op_type != "Tokenizer" or node.domain != MS_DOMAIN or not node.outputs or not node.outputs[0]:
            continue
        encoders = _encoders_after(graph, consumers, node)
        if encoders:
            pad = tokenizer_spec(node.attrs, f"node {node.name!r} (Tokenizer)").pad
            for encoder in encoders:
                _check_pad(node, pad, encoder)
        found = _chain(graph, consumers, node)
        if found is None:
            continue
        views, encoder = found
        key_attr, value_attr = ENCODERS[encoder.op_type]
        keys = [str(v) for v in encoder.attrs[key_attr]]
        node.op_type, node.domain = "TokenIds", OUR_DOMAIN
        node.attrs = {**node.attrs, "keys": keys, "values": [int(v) for v in encoder.attrs[value_attr]],
                      "default": int(encoder.attrs.get("default_int64", -1))}
        for name in [node.outputs[0], *(v.outputs[0] for v in views)]:
            _as_ids(graph, name)
        encoder.op_type, encoder.domain, encoder.attrs = "Identity", "", {}
