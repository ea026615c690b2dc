"""The op registry: per ONNX op type, domain and opset version an OpSpec with the op's lowering and its traits.

Shape/type inference comes from ONNX's own per-node inference and the numpy reference (constant folding, tests)
from onnx.reference; an op contributes its LLVM lowering and the facts every stage asks about it: the frontend
(is it supported, data-dependent output bounds, axis ranges, inputs that index memory), the passes (fusion,
conv epilogues, low-precision operands, rematerialization), fluid (layouts, loop orders, cost formulas), the
kernels (work per element) and planning (views, in place). Stages ask `lookup` or `traits`; only the emitter
calls `lower`.

Each op family in ops/ registers its ops with `register`, traits included, so adding an op is one file. The
families are loaded on the first lookup: OPS_PACKAGE's `load_families` imports every module of it (a plugin
load by name, so this base module imports no stage).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Literal

from .ir import is_onnx_domain

LowerFn = Callable[..., None]
BoundFn = Callable[..., list]
CheckFn = Callable[..., "str | None"]
LoopOrders = Literal["matmul", "conv"]
CostKind = Literal["conv", "pool", "global_pool", "concat", "channel_affine", "transpose", "matmul"]
AxisRange = Literal["dim", "boundary"]

OPS_PACKAGE = f"{__package__}.ops"
NEWEST_OPSET = 1 << 30
"""An opset past every registered `since`: lookup(op, NEWEST_OPSET) is the op's newest version."""
OUR_DOMAIN = "fluidml"
"""The domain of the ops passes create (FusedElementwise, Col2Im at any opset, ...)."""
FUSED_OP = "FusedElementwise"
"""A chain of `fusable` ops in one pass over memory (passes/elementwise_fusion.py makes it, ops/fused.py lowers it)."""


@dataclass(frozen=True)
class OpSpec:
    op_type: str
    lower: LowerFn
    since: int = 1
    domain: str = ""
    view: bool = False
    """Output 0 holds exactly input 0's bytes (Reshape, Flatten, ...): it aliases input 0."""
    inplace: bool = False
    """Elementwise: output 0 may be written over input 0 when input 0 dies at this node."""
    dtypes: frozenset[str] | None = None
    """numpy dtype names the lowering accepts for input 0; None means any."""
    notes: str = ""
    elementwise: bool = False
    """The kernel is Kernel.elementwise (one scalar step per element through strides): any layout, and the cost
    model's elementwise estimate (fluid/)."""
    strided: bool = False
    """The kernel reads and writes any layout through strides (besides `elementwise` ops): fluid may give its
    activations non-row-major layouts."""
    layout_anchor: bool = False
    """A connected group of variable tensors keeps its layout candidates only if such a kernel touches it."""
    image: bool = False
    """Image op (Conv, pools, ...): its rank-3/4 activations choose between row-major and channels-last only."""
    loop_orders: LoopOrders | None = None
    """The loop-order family fluid chooses among for this kernel (kernels/matmul_geometry.py); None: the kernel's default."""
    fusable: bool = False
    """A step a FusedElementwise program can hold (ops/fused.py, passes/elementwise_fusion.py)."""
    lowp_native: bool = False
    """Loads and stores storage-only dtypes itself (Kernel.load/store); otherwise passes/lowp_compute.py widens
    its operands to the compute dtype and narrows its outputs back."""
    heavy: bool = False
    """Too costly to recompute for a later consumer (passes/rematerialize.py)."""
    output_bound: BoundFn | None = None
    """Ops whose output shapes depend on the data: (op_type, attrs, input tensors, opset, where, max_dims=, declared=)
    -> per output (dtype, upper-bound shape, data-dependent dims), called by the frontend; `max_dims` holds the
    --max-dim values the user gave for the node's or its outputs' names, `declared` the fully static shapes the model
    declares for its outputs (frontend/shapes.py declared_output_shapes)."""
    work: float = 1.0
    """Scalar operations one element of an elementwise op costs beyond its loads and store: transcendental
    functions are calls or long polynomials, so a chain of them is split for threads much earlier
    (kernels/kernel.py element_work)."""
    cost_kind: CostKind | None = None
    """The cost model's formula for this kernel (fluid/costs.py); None: the elementwise estimate when
    `elementwise`, else the opaque one (bytes moved)."""
    axis_attr: AxisRange | None = None
    """Its `axis`/`axes` attributes index input 0's dims: "dim" in [-rank, rank - 1], "boundary" (a cut between
    dims, Flatten) in [-rank, rank]; the frontend refuses one out of range before inference (frontend/validate.py)."""
    index_inputs: tuple[int, ...] = ()
    """Inputs whose run-time values address memory unchecked (Gather's indices): with one of them unknown at
    build time the op may read or write out of bounds when its values are out of range, so the frontend does not
    compute an If's untaken branch that holds it (frontend/subgraphs.py). A memory-safety fact."""
    epilogue_activation: bool = False
    """An activation the conv kernels apply as they store their output: passes/epilogues.py fuses it into
    the Conv or BatchNormalization that produces its input."""
    type_only_inputs: tuple[int, ...] = ()
    """Inputs of which only the dtype counts, never the values (CastLike's target): a fused chain does not read
    them (passes/elementwise_fusion.py)."""
    run_check: CheckFn | None = None
    """(graph, node) -> the one-line message of a run its kernel fails at run time (a TopK's K outside the axis), or
    None when this node's kernel cannot fail: the kernel then gets the run's status word (frontend/shapes.py)."""
    runtime_extents: bool = False
    """Its lowering honours dims that vary at run time (Operand.dyn, Kernel.extent): loops over such a dim run to
    its run-time value and nothing is unrolled or decided over it at build time. A dynamic build refuses a node
    that reads or writes a varying tensor unless its op says so (emit/emitter.py check_supported)."""
    strings: bool = False
    """Its lowering takes string tensors (strings.py slots, docs/STRINGS.md); the frontend refuses a string tensor
    read or written by any other op."""

    @property
    def layout_safe(self) -> bool:
        """Its activations may take any layout the optimizer picks."""
        return not self.view and (self.strided or self.elementwise)


_REGISTRY: dict[tuple[str, str], list[OpSpec]] = {}
_LOADED = False


def register(op_types: str | tuple[str, ...], since: int = 1, domain: str = "", view: bool = False,
             inplace: bool = False, dtypes: tuple[str, ...] | None = None, notes: str = "", *,
             elementwise: bool = False, strided: bool = False, layout_anchor: bool = False, image: bool = False,
             loop_orders: LoopOrders | None = None, fusable: bool = False, lowp_native: bool = False,
             heavy: bool | None = None, output_bound: BoundFn | None = None, work: float = 1.0,
             cost_kind: CostKind | None = None, axis_attr: AxisRange | None = None, index_inputs: tuple[int, ...] = (),
             epilogue_activation: bool = False, type_only_inputs: tuple[int, ...] = (),
             runtime_extents: bool = False, run_check: CheckFn | None = None,
             strings: bool = False) -> Callable[[LowerFn], LowerFn]:
    """Register the decorated lowering for OP_TYPES with these traits. `heavy` defaults to True outside the
    ONNX domain (contrib and our ops are not recomputed unless they say so)."""
    names = (op_types,) if isinstance(op_types, str) else op_types
    heavy = not is_onnx_domain(domain) if heavy is None else heavy

    def wrap(fn: LowerFn) -> LowerFn:
        for name in names:
            spec = OpSpec(name, fn, since, domain, view, inplace, frozenset(dtypes) if dtypes else None, notes,
                          elementwise, strided, layout_anchor, image, loop_orders, fusable, lowp_native, heavy,
                          output_bound, work, cost_kind, axis_attr, tuple(index_inputs), epilogue_activation,
                          tuple(type_only_inputs), run_check, runtime_extents, strings)
            versions = _REGISTRY.setdefault((domain, name), [])
            versions.append(spec)
            versions.sort(key=lambda s: s.since)
        return fn

    return wrap


def _load_all() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        importlib.import_module(OPS_PACKAGE).load_families()


def lookup(op_type: str, opset: int, domain: str = "") -> OpSpec | None:
    """The newest registered lowering whose `since` is at most the model's opset."""
    _load_all()
    domain = "" if is_onnx_domain(domain) else domain
    best = None
    for spec in _REGISTRY.get((domain, op_type), []):
        if spec.since <= opset:
            best = spec
    return best


def all_specs() -> dict[tuple[str, str], list[OpSpec]]:
    _load_all()
    return dict(_REGISTRY)


def _no_lowering(k) -> None:
    raise LookupError(f"no lowering is registered for {k.node.op_type}")


def traits(op_type: str, opset: int = NEWEST_OPSET, domain: str = "") -> OpSpec:
    """The op's OpSpec (by default its newest version, for the facts every version shares: tests/test_opspec.py
    checks they agree); for an op not registered, one with every trait at its default and no lowering."""
    spec = lookup(op_type, opset, domain)
    return spec if spec is not None else OpSpec(op_type, _no_lowering, domain=domain)


def indexing_op_types() -> frozenset[str]:
    """The op types, in any domain, some registered version of which has index_inputs."""
    return frozenset(op for (_, op), specs in all_specs().items() if any(s.index_inputs for s in specs))

