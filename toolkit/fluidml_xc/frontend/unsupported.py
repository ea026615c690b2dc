"""What the compiler does not support, each named with its own one-line message and fix (InputError, exit 2).

- string tensors read or written by an op whose lowering does not take strings: `check_strings`
- training-only ops (Gradient, other ai.onnx.preview.training ops than the optimizers we lower, ORT
  training graphs' *Grad ops): `check_training`
- ops we lack: `unsupported_message` (every op type with its nodes); `Missing` collects them while the graph
  is imported, after --bind and the constant folding that resolves an `If`, so the list names the ops of the
  graph that would be compiled (an `If` that a bound input resolves is not in it)
- shapes that depend on run-time values (a Reshape target, a Range limit, Tile repeats, ... computed
  from an input or from data): `unresolved_shape`, which names the op and the input whose value
  decides, and suggests --bind for graph inputs a deployment can freeze.

The frontend calls these; nothing here changes the graph.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from ..errors import InputError
from ..ir import is_onnx_domain
from ..opspec import lookup, traits
from ..strings import is_string
from .bind_hints import inputs_behind
from .builder import outer_references
from .domains import Opsets
from .expanders import FOLDABLE_ONLY, SUBGRAPH_OPS, has_tensor_expansion

TRAINING_DOMAIN = "ai.onnx.preview.training"
ORT_TRAINING_OPS = {"InPlaceAccumulator", "InPlaceAccumulatorV2", "ZeroGradient", "GradientAccumulator", "YieldOp",
                    "PassThrough", "SGDOptimizer", "AdamOptimizer", "AdamWOptimizer", "LambOptimizer", "SGDOptimizerV2"}
"""com.microsoft ops that only ORT training graphs hold (besides the *Grad ops)."""

SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,), "Pad": (1, 3),
    "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "CenterCropPad": (1, 2), "ReduceSum": (1,), "ReduceMean": (1,),
    "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "STFT": (1, 3), "DFT": (1, 2),
    "MaxUnpool": (2,), "Loop": (0, 1), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,), "MelWeightMatrix": (0, 1),
}
"""op -> inputs whose values (not only shapes) decide its output shape."""

BINDABLE_MAX = 4096
"""A graph input that is a scalar, or integer/bool with at most this many elements, may be a deployment
constant worth --bind (a length, a sample rate, a shape, a flag); other inputs are the data itself."""


def _bindable(t) -> bool:
    return t.size == 1 or (np.dtype(t.dtype).kind in "biu" and t.size <= BINDABLE_MAX)


def check_strings(graph) -> None:
    """After import: a node that reads or writes a string tensor must be an op whose lowering takes strings
    (OpSpec.strings)."""
    for node in graph.nodes:
        if traits(node.op_type, graph.opset, node.domain).strings:
            continue
        for name in (*node.inputs, *node.outputs):
            t = graph.tensors.get(name) if name else None
            if t is not None and is_string(t.dtype):
                what = "constant" if t.is_const else "tensor"
                raise InputError(f"{what} {name!r} ({node.op_type} node {node.name!r}) is a string tensor, which "
                                 f"{node.op_type} does not take in fluidml-xc (docs/STRINGS.md lists the string ops): "
                                 "keep that text processing in the application and compile the rest "
                                 "(onnx.utils.extract_model cuts the model at numeric tensors)")


def _training_ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    opsets, found = Opsets.of_model(model), []
    for i, node in enumerate(model.graph.node):
        label = node.name or f"{node.op_type}_{i}"
        if node.domain == TRAINING_DOMAIN and lookup(node.op_type, opsets.version(node.domain), node.domain) is None:
            found.append((f"{node.domain}.{node.op_type}", label))
        elif node.domain == "com.microsoft" and (node.op_type.endswith("Grad") or node.op_type in ORT_TRAINING_OPS):
            found.append((f"{node.domain}.{node.op_type}", label))
    return found


def check_training(model: onnx.ModelProto) -> None:
    """Before import: ops that exist only in training graphs (the optimizers Adagrad/Adam/Momentum are lowered)."""
    found = _training_ops(model)
    if found:
        listed = ", ".join(f"{op} (node {name!r})" for op, name in found[:4]) + (", ..." if len(found) > 4 else "")
        raise InputError(f"training-only ops: {listed}: fluidml-xc compiles inference graphs; export the model for "
                         "inference (eval mode, no gradient graph, e.g. torch.onnx.export(..., "
                         "training=torch.onnx.TrainingMode.EVAL)) or cut the inference part out with onnx.utils.extract_model")


def _top_node(model: onnx.ModelProto, label: str) -> onnx.NodeProto | None:
    """The model's own node an expanded node (named `TOP/...` by inlining or unrolling) came from."""
    top = label.split("/")[0]
    for i, node in enumerate(model.graph.node):
        if (node.name or f"{node.op_type}_{i}") == top:
            return node
    return None


def _graph_inputs_behind(model: onnx.ModelProto, name: str, label: str) -> list[str]:
    found = inputs_behind(model, name)
    top = _top_node(model, label) if not found and "/" in label else None
    if top is not None:
        found = sorted({s for n in top.input for s in inputs_behind(model, n)})
    return found


def unsupported_message(missing: list[tuple[str, str]]) -> str:
    """One line naming every unsupported op type with its nodes, from (op type, node name) pairs."""
    by_type: dict[str, list[str]] = {}
    for op, node in missing:
        by_type.setdefault(op, []).append(node)
    listed = "; ".join(f"{op} (node {', '.join(repr(n) for n in names[:3])}{', ...' if len(names) > 3 else ''})"
                       for op, names in sorted(by_type.items()))
    return f"unsupported ops: {listed}; see docs/SUPPORTED_OPS.md, or replace them before export"


def _label(node) -> str:
    """`Op`, or `domain.Op` outside the default domain (an onnx NodeProto or an ir.Node)."""
    return node.op_type if is_onnx_domain(node.domain) else f"{node.domain}.{node.op_type}"


def _schema(node: onnx.NodeProto, opsets: Opsets):
    try:
        return onnx.defs.get_schema(node.op_type, opsets.version(node.domain), node.domain)
    except onnx.defs.SchemaError:
        return None


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every name a node reads: its inputs and what its subgraphs take from the enclosing scope."""
    names = {n for n in node.input if n}
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            names |= outer_references(g)
    return names


@dataclass
class Missing:
    """The unsupported ops met while importing. An op with neither a lowering nor an ONNX schema cannot be
    shape-inferred: it is recorded and its outputs are marked `cut`; a node reading a cut tensor is not imported
    either (its outputs are cut too) and is recorded when it is unsupported in itself (no lowering, no function
    body, not an op the importer expands or folds)."""

    opsets: Opsets
    ops: list[tuple[str, str]] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)

    def skip(self, node: onnx.NodeProto, name: str, structured: bool = False) -> bool:
        """Whether `node` stays out of the import (recorded when unsupported); `structured`: a sequence/optional
        node, which sequences.py expands."""
        supported = structured or lookup(node.op_type, self.opsets.version(node.domain), node.domain) is not None
        expandable = has_tensor_expansion(node)
        schema = None if supported else _schema(node, self.opsets)
        if (supported or expandable or schema is not None) and not (self.cut and self.cut & _reads(node)):
            return False
        handled = expandable or schema is not None and (
            node.op_type in SUBGRAPH_OPS | FOLDABLE_ONLY or node.domain == "ai.onnx.ml"
            or schema.function_opset_versions or schema.context_dependent_function_opset_versions)
        if not supported and not handled:
            self.ops.append((_label(node), name))
        self.cut.update(o for o in node.output if o)
        return True

    def check(self, kept: list) -> None:
        """After the import: every op met without a lowering, with the imported nodes that lack one, in one line."""
        if self.ops:
            also = [(_label(n), n.name) for n in kept if lookup(n.op_type, self.opsets.version(n.domain), n.domain) is None]
            raise InputError(unsupported_message(self.ops + also))


def unresolved_shape(folder, node: onnx.NodeProto, output: str) -> str:
    """The message for an output of `node` whose shape stays unknown with every input shape static; the
    frontend raises it as an errors.UnresolvedShape naming the output (backend.FxcBackendRep binds the inputs
    it needs)."""
    label = node.name or node.op_type
    op = _label(node)
    if lookup(node.op_type, folder.opsets.version(node.domain), node.domain) is None and node.op_type not in SHAPE_INPUTS:
        return f"the shape of {output!r} ({op} node {label!r}) is unknown: {unsupported_message([(op, label)])}"
    positions = SHAPE_INPUTS.get(node.op_type, tuple(range(len(node.input))))
    deciding = [node.input[i] for i in positions if i < len(node.input) and node.input[i]
                and node.input[i] in folder.tensors and not folder.tensors[node.input[i]].is_const]
    where = f"the shape of {output!r} ({op} node {label!r})"
    top = _top_node(folder.model, label) if "/" in label else None
    if top is not None and top.op_type != node.op_type:
        where = f"the shape of {output!r} ({op} node {label!r}, from {top.op_type} node {label.split('/')[0]!r})"
    if not deciding:
        return (f"{where} cannot be inferred although every input shape is static: the op's output shape is not "
                "defined for these inputs; check the node's attributes or re-export")
    value = deciding[0]
    from_dynamic = folder.dynamic.get(value)
    if from_dynamic:
        return (f"{where} depends on the values of {value!r}, whose own shape depends on the data ({from_dynamic}): "
                "a data-dependent shape is supported only on graph outputs; bound the size in the model (e.g. a fixed "
                "maximum with Slice/Pad)")
    sources = _graph_inputs_behind(folder.model, value, label)
    small = [s for s in sources if s in folder.tensors and _bindable(folder.tensors[s])]
    if sources and len(small) == len(sources):
        binds = " ".join(f"--bind {s}=VALUE" for s in sources)
        return (f"{where} depends on the run-time value of {value!r}, computed from input "
                f"{', '.join(repr(s) for s in sources)}: freeze it at build time with {binds}")
    data = ", ".join(repr(s) for s in sources) if sources else "the model's data"
    return (f"{where} depends on the run-time value of {value!r}, computed from {data}: a data-dependent shape; "
            "make that size a constant in the model (a fixed maximum with Slice/Pad)"
            + (f", or freeze the small inputs with {' '.join(f'--bind {s}=VALUE' for s in small)}" if small else ""))
