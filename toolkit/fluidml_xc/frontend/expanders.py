"""What the importer replaces instead of lowering: one registry of import-time expansions keyed by (domain, op type).

A key holds up to two expansions, by what the node works on:

- `structure` (sequences.py): a node over sequence/optional values, or one that makes them (a sequence op, an If
  whose branches give them, the Select pseudo-op), becomes tensor ops or nothing, or raises; it always expands;
- `tensor` (subgraphs.py: If/Loop/Scan; ml_ops.py: ai.onnx.ml linear models): once the node's inputs have static
  shapes, its replacement nodes, or None when it is imported as it is (and lowered, or reported unsupported).

The importer asks `is_structured` and `expand`; the replacement nodes are imported like the model's own.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from ..errors import InputError
from ..ir import is_onnx_domain

SUBGRAPH_OPS = {"If", "Loop", "Scan", "SequenceMap"}
"""Ops holding subgraphs: never folded; imported only through an expansion."""
FOLDABLE_ONLY = {"Constant", "Shape", "Size", "ConstantOfShape"}
"""Ops the importer folds (never inlined from a function body; without a lowering, not reported while foldable)."""


@dataclass(frozen=True)
class Scope:
    """What an expansion reads besides its node, and the structures it records."""

    tensors: dict
    """Name -> ir.Tensor of everything imported so far (static shapes, constant values)."""
    opset: int
    folder: object | None = None
    """The importer's folder: an If on a run-time condition infers its branches' shapes with a copy of it."""
    structs: dict = field(default_factory=dict)
    """Sequence/optional value -> its structure (sequences.py); structure expansions add to it."""
    unresolved: dict = field(default_factory=dict)
    """Tensor whose shape stays unknown -> the message naming why (unsupported.unresolved_shape)."""


Expand = Callable[[onnx.NodeProto, str, Scope], "list[onnx.NodeProto] | None"]


@dataclass
class Expanders:
    """The expansions of one (domain, op type)."""

    structure: Expand | None = None
    claims: Callable[[onnx.NodeProto], bool] | None = None
    """Whether a node of this type is a structure node even when it reads no structure (None: only when it does)."""
    tensor: Expand | None = None


REGISTRY: dict[tuple[str, str], Expanders] = {}


def _key(domain: str, op_type: str) -> tuple[str, str]:
    return ("" if is_onnx_domain(domain) else domain, op_type)


def always(node: onnx.NodeProto) -> bool:
    """`claims` of ops that make or take structures whatever their inputs (SequenceConstruct, Optional, ...)."""
    return True


def expands(domain: str, *ops: str, structure: bool = False, claims: Callable[[onnx.NodeProto], bool] | None = None):
    """Registers the decorated function as the structure (`structure=True`) or tensor expansion of each op."""
    def register(fn: Expand) -> Expand:
        for op in ops:
            entry = REGISTRY.setdefault(_key(domain, op), Expanders())
            if (entry.structure if structure else entry.tensor) is not None:
                raise ValueError(f"two {'structure' if structure else 'tensor'} expansions of {domain or 'ai.onnx'} {op}")
            if structure:
                entry.structure, entry.claims = fn, claims
            else:
                entry.tensor = fn
        return fn
    return register


def is_structured(node: onnx.NodeProto, structs: dict) -> bool:
    """Whether `node` works on sequence/optional values, so that its structure expansion replaces it."""
    entry = REGISTRY.get(_key(node.domain, node.op_type))
    if entry is not None and entry.claims is not None and entry.claims(node):
        return True
    return is_onnx_domain(node.domain) and any(n in structs for n in node.input if n)


def has_tensor_expansion(node: onnx.NodeProto) -> bool:
    """Whether `node`'s op has a tensor expansion (it may be imported without a lowering or an ONNX schema)."""
    entry = REGISTRY.get(_key(node.domain, node.op_type))
    return entry is not None and entry.tensor is not None


def expand(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """The nodes replacing `node` (a structure node's may be none: it only records structures in `scope.structs`),
    or None when the node is imported as it is."""
    if not is_structured(node, scope.structs):
        return expand_tensors(node, node_name, scope)
    entry = REGISTRY.get(_key(node.domain, node.op_type))
    if entry is None or entry.structure is None:
        bad = next(n for n in node.input if n in scope.structs)
        raise InputError(f"node {node_name!r} ({node.op_type}) reads the sequence/optional value {bad!r}: only sequence "
                         "and optional ops, Identity, If and Loop accept one")
    return entry.structure(node, node_name, scope)


def expand_tensors(node: onnx.NodeProto, node_name: str, scope: Scope) -> list[onnx.NodeProto] | None:
    """The tensor expansion of `node` (None: there is none, or it leaves the node as it is)."""
    entry = REGISTRY.get(_key(node.domain, node.op_type))
    if entry is None or entry.tensor is None:
        return None
    return entry.tensor(node, node_name, scope)
