"""ONNX -> ir.Graph: static shapes, constant folding, dead-code removal.

Per-node shape/type inference is ONNX's own (onnx.shape_inference.infer_node_outputs, fed with the
values of constant inputs); constant folding evaluates nodes with onnx.reference, the numpy reference
implementation of every ONNX op.
"""
from __future__ import annotations

import collections
import copy
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from ..errors import InputError, NeedsBound, UnresolvedShape
from ..ir import DEFAULT_BOUND, Graph, Node, Tensor, is_onnx_domain
from ..opspec import BoundFn, lookup, traits
from ..strings import DEFAULT_MAX_STRING_BYTES, use_slots
from . import mel, ml_ops, ml_svm, subgraphs, string_labels, tfidf, zipmap  # noqa: F401 - they register their expansions
from .builder import attrs, rename_in_attribute
from .domains import Opsets
from .expanders import FOLDABLE_ONLY, SUBGRAPH_OPS, Scope, expand, is_structured
from .input_shapes import resolve_shapes, suggestions
from .loops import EXTRA_INPUTS_ATTR, import_loop
from .names import rename_repeated, unique_names
from .sequences import descriptor, flat_names, input_structure, output_elements, type_kind
from .shapes import ATTR, PASS_THROUGH, declared_output_shapes, elementwise_over
from .signal_checks import check_signal_node
from .unsupported import Missing, check_strings, check_training, unresolved_shape
from .validate import OUTPUT_CHECKS, SHAPE_CHECKS, Limits, check_external_data, check_opsets, validate_model

NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
INFERENCE_DEFAULTS = {"STFT": ("onesided",)}
"""Attributes ONNX's per-node inference (infer_node_outputs) reads as 0 when absent although the schema
default differs (STFT's onesided defaults to 1): filled in from the schema before inferring."""
SHAPE_FROM_INPUT = {"MaxUnpool": 2}
"""op -> input whose build-time value is output 0's shape (dtype of input 0), where ONNX's inference leaves it open."""
SHAPE_OF_INPUT_0 = {"MeanVarianceNormalization"}
"""Ops whose output 0 has input 0's dtype and shape, where ONNX's inference leaves it open (onnx 1.23 cannot infer
MeanVarianceNormalization's function body when `axes` is given) and the model is too big to evaluate."""


@dataclass(frozen=True)
class FrontendOptions:
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fold_constants: bool = True
    structures: dict[str, object] = field(default_factory=dict)
    """Sequence/optional graph inputs -> ABI descriptor (sequences.py); the element shapes are the
    `NAME.K` entries of input_shapes. Without one, a sequence's length is the number of such entries."""
    limits: Limits = field(default_factory=Limits)
    """Largest tensor / constants / arena (--max-memory) and the target's pointer width (validate.py)."""
    max_dims: dict[str, int] = field(default_factory=dict)
    """--max-dim: the most steps of a run-time Loop, by node or scan output name (loops.py)."""
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES
    """--max-string-bytes: the bytes each string element holds (strings.py slots)."""


def load_model(path: str | Path) -> onnx.ModelProto:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model file {str(path)!r} not found: pass the path of an .onnx file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several types for corrupt data
        raise InputError(f"{str(path)!r} is not a readable ONNX model ({type(exc).__name__}): re-export it or check the download") from None
    check_external_data(model, path.parent)
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:
        raise InputError(f"{str(path)!r}: its external data cannot be read ({type(exc).__name__}: {str(exc)[:200]}): "
                         "keep the data files beside the model") from None
    if not model.graph.node and not model.graph.output:
        raise InputError(f"{str(path)!r} is not a readable ONNX model (empty graph): re-export it or check the download")
    return model


def _opset(model: onnx.ModelProto) -> int:
    return Opsets.of_model(model).default


def _dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _graph_inputs(model: onnx.ModelProto, options: FrontendOptions, structs: dict | None = None) -> dict[str, Tensor]:
    initializers = {init.name for init in model.graph.initializer}
    tensors, missing, open_inputs = {}, [], []
    known = {vi.name for vi in model.graph.input}
    structured = {vi.name for vi in model.graph.input if type_kind(vi.type) in ("seq", "opt") and vi.name not in initializers}
    for name in options.input_shapes:
        if name.rpartition(".")[0] in structured and name.rpartition(".")[2].isdigit():
            continue
        if name not in known or name in initializers:
            inputs = [vi.name for vi in model.graph.input if vi.name not in initializers]
            raise InputError(f"--input-shape names {name!r}, which is not an input of the model; inputs: {', '.join(inputs)}")
    shapes = resolve_shapes(model, options.input_shapes, skip=structured)
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        ttype = vi.type.tensor_type
        if vi.name in structured:
            struct, elements = input_structure(vi.name, vi.type, options.structures.get(vi.name), options.input_shapes)
            for flat, elem in elements:
                if flat not in options.input_shapes:
                    missing.append(f"{flat} (pass --input-shape {flat}=DIMS)")
                    continue
                tensors[flat] = Tensor(flat, _dtype(elem), tuple(options.input_shapes[flat]))
            if structs is not None:
                structs[vi.name] = struct
            continue
        if not vi.type.HasField("tensor_type"):
            raise InputError(f"input {vi.name!r} is not a tensor (sequence/map/optional inputs are not supported)")
        if vi.name in shapes:
            shape = shapes[vi.name]
        else:
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in ttype.shape.dim]
            if not ttype.HasField("shape") or None in dims:
                open_inputs.append(vi.name)
                continue
            shape = tuple(dims)
        tensors[vi.name] = Tensor(vi.name, _dtype(ttype.elem_type), tuple(shape))
    missing += suggestions(model, open_inputs, shapes)
    if missing:
        raise InputError("dynamic input shape: " + "; ".join(missing))
    return tensors


class _Folder:
    """Walks nodes in order, folding constants and inferring static shapes."""

    def __init__(self, model: onnx.ModelProto, tensors: dict[str, Tensor], fold: bool, limits: Limits | None = None,
                 max_dims: dict[str, int] | None = None, max_string_bytes: int = DEFAULT_MAX_STRING_BYTES):
        self.model, self.tensors, self.fold, self.limits = model, tensors, fold, limits or Limits()
        self.max_dims = dict(max_dims or {})
        self.max_string_bytes = max_string_bytes
        self.opsets = Opsets.of_model(model)
        self.opset = self.opsets.default
        self.opset_imports = list(model.opset_import)
        self.unresolved: dict[str, str] = {}
        self.dynamic: dict[str, str] = {}
        """Tensors whose shape depends on input data (the shape recorded is their upper bound) -> the
        producing op, as "OpType node 'name'"."""

    def const(self, name: str, value: np.ndarray) -> None:
        value = np.asarray(value)
        self.limits.check_tensor(f"constant {name!r}", value.shape, value.dtype)
        self.tensors[name] = Tensor(name, value.dtype, tuple(value.shape), value)

    def evaluate(self, node: onnx.NodeProto, stand_ins: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        from onnx.reference import ReferenceEvaluator

        from ..cast_rules import REFERENCE_OPS  # with onnx.reference: imported when a build folds a node

        stand_ins = stand_ins or {}
        inputs = [n for n in node.input if n]
        graph = helper.make_graph(
            [node], "fold",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(self.tensors[n].dtype), self.tensors[n].shape) for n in inputs],
            [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output if n])
        model = helper.make_model(graph, opset_imports=self.opset_imports, ir_version=self.model.ir_version)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, {n: stand_ins[n] if n in stand_ins else self.tensors[n].value for n in inputs})
        return [np.asarray(r) for r in results]

    def infer_dynamic(self, node: onnx.NodeProto, attrs: dict, bound: BoundFn, strings: bool = False) -> dict[str, Tensor]:
        """Ops whose output shapes depend on input data: static upper bounds (the op's OpSpec.output_bound); the
        data-dependent dims are recorded in the node's `_dynamic_dims` attribute (see shapes.py)."""
        inputs = [self.tensors[n] if n else None for n in node.input]
        asked = {n: self.max_dims[n] for n in [node.name, *node.output, DEFAULT_BOUND] if n and n in self.max_dims}
        more = {"max_string_bytes": self.max_string_bytes} if strings else {}
        try:
            bounds = bound(node.op_type, attrs, inputs, self.opsets.version(node.domain), node.name or node.op_type,
                           max_dims=asked, declared=declared_output_shapes(self.model, node.output), **more)
        except NeedsBound:
            out = next(o for o in node.output if o)
            label = node.name or node.op_type
            raise UnresolvedShape(f"{unresolved_shape(self, node, out)}; or bound it with --max-dim {label}=N "
                                  f"(--max-dim '{DEFAULT_BOUND}=N' bounds every such size)", out) from None
        result, marks = {}, {}
        for i, (name, (dtype, shape, dims)) in enumerate(zip(node.output, bounds)):
            if not name:
                continue
            result[name] = Tensor(name, np.dtype(dtype), tuple(int(d) for d in shape))
            if dims:
                marks[i] = tuple(dims)
                self.dynamic[name] = f"{node.op_type} node {node.name or node.op_type!r}"
        if marks:
            attrs[ATTR] = marks
        return result

    def _inputs(self, node: onnx.NodeProto) -> list:
        return [self.tensors.get(n) if n else None for n in node.input]

    def infer(self, node: onnx.NodeProto) -> dict[str, Tensor]:
        shapes_of = ml_ops.OUTPUT_SHAPES.get((node.domain, node.op_type))
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opsets.version(node.domain), node.domain)
        except onnx.defs.SchemaError:
            if shapes_of is None or not node.input or node.input[0] not in self.tensors:
                return {}
            return {n: Tensor(n, d, s) for n, (d, s) in shapes_of(node, self._inputs(node)).items() if n}
        types, data = {}, {}
        for name in node.input:
            if not name:
                continue
            t = self.tensors[name]
            types[name] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(t.dtype), t.shape)
            if t.is_const and t.size <= 1 << 16:
                data[name] = numpy_helper.from_array(t.value, name)
        present = {a.name for a in node.attribute}
        missing = [a for a in INFERENCE_DEFAULTS.get(node.op_type, ()) if a not in present and a in schema.attributes]
        if missing:
            node = copy.deepcopy(node)
            node.attribute.extend(schema.attributes[a].default_value for a in missing)
        try:
            out_types = shape_inference.infer_node_outputs(schema, node, types, data, opset_imports=self.opset_imports)
        except Exception as exc:
            raise InputError(f"node {node.name or node.op_type!r} ({node.op_type}): invalid shapes or attributes: {str(exc).splitlines()[0]}") from None
        result = {}
        shape_input = SHAPE_FROM_INPUT.get(node.op_type)
        if shape_input is not None and shape_input < len(node.input) and node.input[shape_input] and node.output[0]:
            source = self.tensors[node.input[shape_input]]
            if source.is_const:
                dims = tuple(int(v) for v in np.ravel(source.value))
                result[node.output[0]] = Tensor(node.output[0], self.tensors[node.input[0]].dtype, dims)
        if node.op_type in SHAPE_OF_INPUT_0 and node.output[0]:
            source = self.tensors[node.input[0]]
            result[node.output[0]] = Tensor(node.output[0], source.dtype, source.shape)
        if shapes_of is not None and node.input and node.input[0] in self.tensors:
            for name, (dtype, dims) in shapes_of(node, self._inputs(node)).items():
                if name:
                    result[name] = Tensor(name, dtype, dims)
        for name, tp in out_types.items():
            tt = tp.tensor_type
            if not tp.HasField("tensor_type") or not tt.HasField("shape"):
                continue
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if None in dims:
                continue
            result[name] = Tensor(name, _dtype(tt.elem_type), tuple(dims))
        if any(o and o not in result for o in node.output):
            result.update(self.infer_by_evaluation(node))
        return result

    def infer_by_evaluation(self, node: onnx.NodeProto) -> dict[str, Tensor]:
        """Output shapes by running the reference on stand-in inputs, for ops ONNX's inference leaves open
        (function ops such as MeanVarianceNormalization); skipped for big inputs.

        Only when every runtime input is floating point (shape-like inputs - shapes, axes, repeats, K,
        pads - are integers) and two different fills (0 and 1) give the same shapes: an output shape
        that depends on input values must stay unresolved, never be guessed from stand-in values."""
        inputs = [n for n in node.input if n]
        if sum(self.tensors[n].size for n in inputs) > 1 << 20:
            return {}
        runtime = [n for n in inputs if not self.tensors[n].is_const]
        if any(np.dtype(self.tensors[n].dtype).kind != "f" for n in runtime):
            return {}
        saved = {n: self.tensors[n] for n in inputs}
        shapes = []
        try:
            for fill in (0, 1):
                for n in runtime:
                    t = saved[n]
                    self.tensors[n] = Tensor(n, t.dtype, t.shape, np.full(t.shape, fill, t.dtype))
                values = self.evaluate(node)
                shapes.append([(np.asarray(v).dtype, tuple(np.shape(v))) for v in values])
        except Exception:
            return {}
        finally:
            self.tensors.update(saved)
        if shapes[0] != shapes[1]:
            return {}
        return {n: Tensor(n, dtype, shape) for n, (dtype, shape) in zip([o for o in node.output if o], shapes[0])}

    def keeps_dynamic(self, node: onnx.NodeProto, inferred: dict[str, Tensor], dynamic_in: list[str]) -> bool:
        """An elementwise node over data-dependent tensors of one producer with scalar operands (shapes.elementwise_over)."""
        if len({self.dynamic[n] for n in dynamic_in}) != 1:
            return False
        spec = traits(node.op_type, self.opsets.version(node.domain), node.domain)
        inputs = [(self.tensors[n], n in self.dynamic) for n in node.input if n]
        return elementwise_over(node.op_type, spec.elementwise, inputs, inferred.get(node.output[0]))

    def import_body(self, model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], name: str) -> Graph:
        """A run-time Loop's body as its own graph, with this import's limits and --max-dim."""
        return import_model(model, FrontendOptions(input_shapes=shapes, limits=self.limits, max_dims=self.max_dims,
                                                   max_string_bytes=self.max_string_bytes), name)

    def check_sizes(self, node: onnx.NodeProto, tensors: dict[str, Tensor]) -> None:
        for name, t in tensors.items():
            self.limits.check_tensor(f"tensor {name!r} (output of {node.op_type} node {node.name or node.op_type!r})", t.shape, t.dtype)

    def visit(self, node: onnx.NodeProto, attrs: dict) -> bool:
        """Returns True when the node was folded away."""
        inputs = [n for n in node.input if n]
        for name in inputs:
            if name in self.unresolved:
                raise UnresolvedShape(self.unresolved[name], name)
            if name not in self.tensors:
                raise InputError(f"node {node.name or node.op_type!r} reads {name!r}, which nothing produces: the model is malformed")
        if node.op_type == "Constant" and is_onnx_domain(node.domain):
            self.const(node.output[0], self.evaluate(node)[0])
            return True
        can_fold = self.fold and node.op_type not in NONDETERMINISTIC and node.op_type not in SUBGRAPH_OPS
        dynamic_in = [n for n in inputs if n in self.dynamic]
        if dynamic_in and node.op_type in ("Shape", "Size"):
            raise InputError(f"node {node.name or node.op_type!r} ({node.op_type}) reads the shape of {dynamic_in[0]!r}, which "
                             f"depends on the data ({self.dynamic[dynamic_in[0]]}): such tensors are supported only as graph "
                             "outputs, directly or through Cast, CastLike, Identity")
        if can_fold and node.op_type in ("Shape", "Size") and inputs:
            src = self.tensors[inputs[0]]
            shape = np.array(src.shape, dtype=np.int64)
            if node.op_type == "Size":
                self.const(node.output[0], np.array(src.size, dtype=np.int64))
            else:
                start, end = attrs.get("start", 0), attrs.get("end", None)
                self.const(node.output[0], shape[start:end])
            return True
        type_only = {node.input[i] for i in traits(node.op_type, self.opsets.version(node.domain), node.domain).type_only_inputs
                     if i < len(node.input) and node.input[i]}
        check = SHAPE_CHECKS.get(node.op_type)
        if check is not None and is_onnx_domain(node.domain):
            check(node.op_type, node.name or node.op_type, attrs, [self.tensors[n].shape if n else None for n in node.input])
        if is_onnx_domain(node.domain):
            check_signal_node(node.op_type, node.name or node.op_type, self.opsets.version(node.domain), attrs,
                              [self.tensors[n] if n else None for n in node.input])
        if can_fold and all(self.tensors[n].is_const or n in type_only for n in inputs) and is_onnx_domain(node.domain):
            try:
                planned = self.infer(node)
            except InputError:
                planned = {}
            self.check_sizes(node, planned)
            stand_ins = {n: np.zeros(self.tensors[n].shape, self.tensors[n].dtype) for n in type_only if not self.tensors[n].is_const}
            try:
                values = self.evaluate(node, stand_ins)
            except Exception:
                values = None
            if values is not None:
                for name, value in zip([n for n in node.output if n], values):
                    self.const(name, value)
                return True
        spec = lookup(node.op_type, self.opsets.version(node.domain), node.domain)
        if node.op_type == "Loop" and is_onnx_domain(node.domain):
            inferred = import_loop(self, node, attrs, self.import_body)
        elif spec is not None and spec.output_bound is not None:
            inferred = self.infer_dynamic(node, attrs, spec.output_bound, spec.strings)
        else:
            inferred = self.infer(node)
            if dynamic_in and node.output and node.output[0] and (
                    node.op_type in PASS_THROUGH or self.keeps_dynamic(node, inferred, dynamic_in)):
                self.dynamic[node.output[0]] = self.dynamic[dynamic_in[0]]
        self.check_sizes(node, inferred)
        check = OUTPUT_CHECKS.get(node.op_type)
        if check is not None and is_onnx_domain(node.domain):
            check(node.op_type, node.name or node.op_type, attrs, [self.tensors[n].shape if n else None for n in node.input],
                  [inferred[n].shape if n in inferred else None for n in node.output])
        for name in node.output:
            if not name:
                continue
            if name not in inferred:
                self.unresolved[name] = unresolved_shape(self, node, name)
                continue
            self.tensors[name] = inferred[name]
        return False


def _remove_dead(graph: Graph) -> None:
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(n for n in node.inputs if n)
    graph.nodes = kept[::-1]
    for node in graph.nodes:
        node.outputs = [o if o in needed else "" for o in node.outputs]
    graph.tensors = {k: v for k, v in graph.tensors.items() if k in needed or k in graph.inputs}


def _function_body(node: onnx.NodeProto, opsets: Opsets, tensors: dict[str, Tensor]) -> onnx.FunctionProto | None:
    """The ONNX function that defines `node`'s op (the newest version not above its domain's opset), if any."""
    target = opsets.version(node.domain)
    try:
        schema = onnx.defs.get_schema(node.op_type, target, node.domain)
    except onnx.defs.SchemaError:
        return None
    body = None
    plain = sorted(schema.function_opset_versions)
    context = sorted(schema.context_dependent_function_opset_versions)
    candidates = [(v, False) for v in plain] + [(v, True) for v in context]
    if not candidates:
        return None
    below = [c for c in candidates if c[0] <= target]
    if not below:  # the body is written in a newer opset than the model's: its ops would be read differently
        return None
    version, dependent = max(below)
    if dependent:
        types = []
        for name in node.input:
            if name and name in tensors:
                t = tensors[name]
                types.append(helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(t.dtype), t.shape).SerializeToString())
            else:
                types.append(onnx.TypeProto().SerializeToString())
        with_defaults = onnx.NodeProto()
        with_defaults.CopyFrom(node)
        _add_default_attributes(with_defaults, schema)
        data = schema.get_context_dependent_function_with_opset_version(version, with_defaults.SerializeToString(), types)
    else:
        data = schema.get_function_with_opset_version(version)
    if not data:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(data)
    if any((entry.domain or "") == "" and entry.version > opsets.default for entry in body.opset_import):
        return None
    return body


def _add_default_attributes(node: onnx.NodeProto, schema) -> None:
    present = {a.name for a in node.attribute}
    for attr_name, attr in schema.attributes.items():
        if attr_name not in present and attr.default_value and attr.default_value.name:
            node.attribute.append(attr.default_value)


def _inline(node: onnx.NodeProto, body: onnx.FunctionProto, prefix: str, opsets: Opsets) -> list[onnx.NodeProto]:
    """`node` replaced by the nodes of its function body: formal inputs/outputs renamed to the node's
    tensors (missing optional inputs to ""), internal tensors prefixed, attribute references resolved."""
    schema = onnx.defs.get_schema(node.op_type, opsets.version(node.domain), node.domain)
    full = onnx.NodeProto()
    full.CopyFrom(node)
    _add_default_attributes(full, schema)
    attributes = {a.name: a for a in full.attribute}
    rename = {formal: (node.input[i] if i < len(node.input) else "") for i, formal in enumerate(body.input)}
    rename.update({formal: (node.output[i] if i < len(node.output) else "") for i, formal in enumerate(body.output)})

    def name_of(internal: str) -> str:
        if not internal:
            return ""
        return rename[internal] if internal in rename else prefix + internal

    nodes = []
    for inner in body.node:
        new = onnx.NodeProto()
        new.CopyFrom(inner)
        del new.input[:]
        del new.output[:]
        del new.attribute[:]
        new.input.extend(name_of(n) for n in inner.input)
        new.output.extend(name_of(n) for n in inner.output)
        for attr in inner.attribute:
            if attr.ref_attr_name:
                if attr.ref_attr_name in attributes:
                    value = onnx.AttributeProto()
                    value.CopyFrom(attributes[attr.ref_attr_name])
                    value.name = attr.name
                    new.attribute.append(value)
            else:
                new.attribute.append(attr)
        for attr in new.attribute:  # subgraphs (Scan/If/Loop bodies) read the body's tensors by name too
            if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                rename_in_attribute(attr, name_of)
        new.name = prefix + (inner.name or inner.op_type)
        nodes.append(new)
    return nodes


MAX_INLINE_DEPTH = 8


def import_model(model: onnx.ModelProto, options: FrontendOptions = FrontendOptions(), name: str = "model") -> Graph:
    """Build the compiler graph from an ONNX model with every shape static.

    An op without a lowering whose ONNX schema defines it as a function (Attention, RMSNormalization,
    SoftmaxCrossEntropyLoss, Swish, ...) is replaced by its function body."""
    check_opsets(model)
    check_training(model)
    validate_model(model, options.limits, unique_names(model))
    structs: dict = {}
    """sequence/optional values -> their build-time structure (sequences.py)"""
    tensors = _graph_inputs(model, options, structs)
    for t in tensors.values():
        options.limits.check_tensor(f"input {t.name!r}", t.shape, t.dtype)
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        tensors[init.name] = Tensor(init.name, value.dtype, tuple(value.shape), value)
    folder = _Folder(model, tensors, options.fold_constants, options.limits, options.max_dims, options.max_string_bytes)
    opsets = Opsets.of_model(model)
    opset = opsets.default
    nodes, missing = [], Missing(opsets)
    scope = Scope(tensors, opset, folder, structs, folder.unresolved)
    work = [(onnx_node, node_name, 0) for onnx_node, node_name in zip(model.graph.node, unique_names(model))]
    work.reverse()
    while work:
        onnx_node, node_name, depth = work.pop()
        structured = is_structured(onnx_node, structs)
        if missing.skip(onnx_node, node_name, structured):
            continue
        inputs = [n for n in onnx_node.input if n]
        if structured:
            expanded = expand(onnx_node, node_name, scope)
            work.extend(reversed([(n, n.name, depth + 1) for n in expanded]))
            continue
        if (depth < MAX_INLINE_DEPTH and onnx_node.op_type not in FOLDABLE_ONLY
                and lookup(onnx_node.op_type, opsets.version(onnx_node.domain), onnx_node.domain) is None
                and all(n in tensors and n not in folder.unresolved for n in inputs)
                and not (options.fold_constants and inputs and all(tensors[n].is_const for n in inputs))):
            body = _function_body(onnx_node, opsets, tensors)
            if body is not None:
                prefix = f"{node_name}/"
                expanded = _inline(onnx_node, body, prefix, opsets)
                work.extend(reversed([(n, n.name, depth + 1) for n in expanded]))
                continue
        if depth < MAX_INLINE_DEPTH and all(n in tensors and n not in folder.unresolved for n in inputs):
            expanded = expand(onnx_node, node_name, scope)
            if expanded is not None:
                work.extend(reversed([(n, n.name, depth + 1) for n in expanded]))
                continue
        values = attrs(onnx_node)
        if not folder.visit(onnx_node, values):
            extra = values.pop(EXTRA_INPUTS_ATTR, [])
            nodes.append(Node(onnx_node.op_type, node_name, list(onnx_node.input) + extra, list(onnx_node.output), values,
                              onnx_node.domain))
    missing.check(nodes)
    outputs, structures = [], {"inputs": {}, "outputs": {}}
    flat_nodes = []
    for vi in model.graph.output:
        if vi.name not in structs and type_kind(vi.type) not in ("seq", "opt"):
            outputs.append(vi.name)
            continue
        found = output_elements(vi.name, vi.type, structs, tensors)
        if found is None:
            outputs.append(vi.name)  # reported below
            continue
        desc, elements = found
        structures["outputs"][vi.name] = desc
        for k, (element, flat) in enumerate(zip(elements, flat_names(vi.name, desc))):
            if flat in tensors:
                raise InputError(f"output {vi.name!r} is a sequence/optional whose element name {flat!r} is taken by a tensor of the model")
            if element in folder.unresolved:
                raise UnresolvedShape(folder.unresolved[element], element)
            flat_nodes.append(helper.make_node("Identity", [element], [flat], name=f"{vi.name}/{k}"))
            outputs.append(flat)
    # an element computed by a node for this output alone is renamed (its node writes the output buffer);
    # the others (graph inputs, constants, tensors used twice or also plain outputs) are copied by an Identity
    producers = {o: n for n in nodes for o in n.outputs if o}
    uses = collections.Counter(n.input[0] for n in flat_nodes)
    for onnx_node in flat_nodes:
        element, flat = onnx_node.input[0], onnx_node.output[0]
        producer = producers.get(element)
        if (producer is not None and uses[element] == 1 and element not in outputs and element in tensors
                and not tensors[element].is_const):
            producer.outputs = [flat if o == element else o for o in producer.outputs]
            for node in nodes:
                node.inputs = [flat if i == element else i for i in node.inputs]
            t = tensors[element]
            tensors[flat] = Tensor(flat, t.dtype, t.shape)
            if element in folder.dynamic:
                folder.dynamic[flat] = folder.dynamic[element]
            continue
        if not folder.visit(onnx_node, {}):
            nodes.append(Node("Identity", onnx_node.name, list(onnx_node.input), list(onnx_node.output), {}, ""))
    for out in outputs:
        if out in folder.unresolved:
            raise UnresolvedShape(folder.unresolved[out], out)
        if out not in tensors:
            raise InputError(f"graph output {out!r} is produced by no node: the model is malformed")
    inputs = []
    for vi in model.graph.input:
        if vi.name in structs and vi.name not in {i.name for i in model.graph.initializer}:
            desc = structures["inputs"][vi.name] = descriptor(structs[vi.name])
            inputs.extend(flat_names(vi.name, desc))
        elif vi.name in tensors and not tensors[vi.name].is_const:
            inputs.append(vi.name)
    rename_repeated(nodes)
    graph = Graph(name, tensors, nodes, inputs, outputs, _opset(model))
    if structures["inputs"] or structures["outputs"]:
        graph.structures = structures
    _remove_dead(graph)
    check_strings(graph)
    use_slots(graph, options.max_string_bytes)
    return graph
