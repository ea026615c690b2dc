"""Bounded dynamic outputs: tensors whose shape depends on input data (NonZero, Compress, Unique, NonMaxSuppression).

Such a tensor has a static upper bound as its graph shape (what the memory plan, the arena and the
caller's output buffer are sized for) and an actual shape written at run time. The producing node
carries `_dynamic_dims` = {output index: dims that depend on the data} (set by the frontend, see
`ops/dynamic.py`); its kernel writes the tensor row-major and contiguous from the start of its buffer
(the actual shape, not the bound's strides) and writes the actual dims (all of them, int64) into a
slot of the arena's dims table.

The dims table and the dynamic kernels' scratch memory sit after the planned arena (`TailLayout`):

    [0, plan.arena_bytes)   planned tensors
    dims table              one int64[rank] slot per dynamic root tensor, 8-byte aligned
    status                  int64, when a kernel may fail the run (OpSpec.run_check: a TopK's K outside its axis):
                            0, or k when the k-th such node (`TailLayout.checks`) failed it (the glue returns
                            FXC_ERR_RUN, the JIT raises RunCheckFailed)
    scratch                 the largest scratch any dynamic kernel needs (they run one at a time)

A dynamic tensor may be a graph output, or reach one through shape-preserving ops (Identity, Cast,
CastLike), which share its slot; any other consumer needs the real shape and is rejected with a
one-line InputError.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from ..ir import BODY_ATTR, Graph, Node
from ..opspec import traits

ATTR = "_dynamic_dims"
PASS_THROUGH = frozenset({"Identity", "Cast", "CastLike"})
"""Ops whose output 0 has input 0's shape element for element: a dynamic input's dims carry over."""


@dataclass
class DynamicTensors:
    root: dict[str, str] = field(default_factory=dict)
    """Every dynamic tensor -> the dynamic op output whose dims slot holds its actual dims."""
    dims: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Every dynamic tensor -> the dims that depend on the data."""
    producer: dict[str, Node] = field(default_factory=dict)
    """Root tensor -> the node computing it."""

    def __bool__(self) -> bool:
        return bool(self.root)


def declared_output_shapes(model, names) -> dict[str, tuple[int, ...]]:
    """Output name -> the shape the model declares for it (value_info or a graph output), for the names whose every
    dim is a fixed size (OpSpec.output_bound's `declared`: ImageDecoder takes it as the exact shape)."""
    wanted = {n for n in names if n}
    out = {}
    for vi in [*model.graph.value_info, *model.graph.output]:
        if vi.name in wanted and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
                out[vi.name] = tuple(int(d.dim_value) for d in dims)
    return out


def node_marks(node: Node) -> dict[int, tuple[int, ...]]:
    marks = node.attrs.get(ATTR) or {}
    return {int(i): tuple(d) for i, d in marks.items()}


def elementwise_over(op_type: str, elementwise: bool, inputs: list, output) -> bool:
    """Whether an elementwise node keeps the data-dependent dims of its input: `inputs` [(tensor, is data-dependent)],
    those that are data-dependent one-dimensional and of the output's shape (one root, checked by the caller), every
    other of one element (a scalar operand), so its kernel run over the bound keeps the actual tensor dense at its
    start (rank 1: no layout can reorder it)."""
    if not elementwise or output is None or op_type in PASS_THROUGH or len(output.shape) != 1:
        return False
    dynamic = [t for t, d in inputs if d]
    return bool(dynamic) and all(t.shape == output.shape for t in dynamic) and all(t.size == 1 for t, d in inputs if not d)


def _shared_root(graph: Graph, node: Node, info: DynamicTensors) -> str | None:
    """The root whose dims slot output 0 of an elementwise `node` shares (elementwise_over), else None."""
    out = node.outputs[0] if node.outputs and node.outputs[0] else None
    roots = {info.root[n] for n in node.inputs if n and n in info.root}
    if out is None or len(roots) != 1:
        return None
    inputs = [(graph.tensors[n], n in info.root) for n in node.inputs if n]
    spec = traits(node.op_type, graph.opset, node.domain)
    return roots.pop() if elementwise_over(node.op_type, spec.elementwise, inputs, graph.tensors[out]) else None


def analyze(graph: Graph) -> DynamicTensors:
    """The dynamic tensors of `graph`; InputError if one feeds an op that would need its real shape."""
    info = DynamicTensors()
    for node in graph.nodes:
        for i, dims in node_marks(node).items():
            if i < len(node.outputs) and node.outputs[i]:
                out = node.outputs[i]
                info.root[out], info.dims[out], info.producer[out] = out, dims, node
    if not info:
        return info
    changed = True
    while changed:  # through shape-preserving consumers (graph.nodes is topological; loop for safety)
        changed = False
        for node in graph.nodes:
            if not node.outputs or not node.outputs[0] or node.outputs[0] in info.root:
                continue
            if node.op_type in PASS_THROUGH and node.inputs and node.inputs[0] in info.root:
                info.root[node.outputs[0]] = info.root[node.inputs[0]]
                info.dims[node.outputs[0]] = info.dims[node.inputs[0]]
                changed = True
            elif (root := _shared_root(graph, node, info)) is not None:
                info.root[node.outputs[0]], info.dims[node.outputs[0]] = root, info.dims[root]
                changed = True
    for node in graph.nodes:
        for k, name in enumerate(node.inputs):
            if not name or name not in info.root:
                continue
            if node.op_type in PASS_THROUGH and (k == 0 or node.op_type == "CastLike"):
                continue
            if node.outputs and node.outputs[0] and info.root.get(node.outputs[0], node.outputs[0]) != node.outputs[0]:
                continue  # an elementwise node over it: its output shares the dims
            src = info.producer[info.root[name]]
            raise InputError(
                f"node {node.name!r} ({node.op_type}) reads {name!r}, whose shape depends on the data "
                f"({src.op_type} node {src.name!r}): such tensors are supported only as graph outputs, "
                f"directly or through {', '.join(sorted(PASS_THROUGH))} or elementwise ops with scalar operands")
    return info


def check(graph: Graph) -> None:
    analyze(graph)


@dataclass(frozen=True)
class RunCheck:
    """A node whose kernel may fail the run, and the one line a failed run reports."""

    node: str
    message: str
    via: str | None = None
    """The run-time Loop of this graph whose body holds the node (its kernel passes the body's status up), or None."""


def run_checks(graph: Graph) -> list[RunCheck]:
    """The nodes whose kernels may fail the run (OpSpec.run_check), in graph order; after a run-time Loop, those of
    its body (depth first, `via` the Loop)."""
    out = []
    for node in graph.nodes:
        check = traits(node.op_type, graph.opset, node.domain).run_check
        message = check(graph, node) if check is not None else None
        if message:
            out.append(RunCheck(node.name, message))
        if BODY_ATTR in node.attrs:
            out += [RunCheck(c.node, c.message, node.name) for c in run_checks(node.attrs[BODY_ATTR])]
    return out


@dataclass
class TailLayout:
    """Where the dims table and the dynamic kernels' scratch live, after the planned arena."""

    slots: dict[str, int] = field(default_factory=dict)
    """Root tensor -> byte offset of its int64[rank] dims slot in the arena."""
    scratch_offset: int = 0
    scratch_bytes: int = 0
    arena_bytes: int = 0
    """The whole arena: planned tensors + dims table + scratch."""
    output_slots: list[int] = field(default_factory=list)
    """Per graph output: the byte offset of its actual dims in the arena, or -1 when its shape is static."""
    output_dims: list[tuple[int, ...]] = field(default_factory=list)
    """Per graph output: the dims that depend on the data (empty when static)."""
    checks: list[RunCheck] = field(default_factory=list)
    """The nodes whose kernels may fail the run: status k names checks[k - 1]."""
    status_offset: int = -1
    """Byte offset of the int64 status word, or -1 when no kernel may fail the run."""

    @property
    def check_codes(self) -> dict[str, int]:
        """Node name -> the status its kernel writes when it fails the run."""
        return {c.node: i + 1 for i, c in enumerate(self.checks) if c.via is None}

    def status_base(self, node: str) -> int | None:
        """What a run-time Loop adds to its body's status to pass it up (None: no check in its body)."""
        return next((i for i, c in enumerate(self.checks) if c.via == node), None)

    def takes_status(self, node: str) -> bool:
        """Whether `node`'s kernel gets the status word: it may fail the run, or a check in its body may."""
        return node in self.check_codes or self.status_base(node) is not None

    @property
    def tail_bytes(self) -> int:
        return self.arena_bytes - self._planned

    _planned: int = 0


def tail_layout(graph: Graph, planned_bytes: int, alignment: int, scratch: dict[str, int] | None = None) -> TailLayout:
    """Place the dims slots after `planned_bytes`; `scratch`: node name -> bytes it needs."""
    info = analyze(graph)
    layout = TailLayout(_planned=int(planned_bytes))
    top = int(planned_bytes)
    if info:
        top = -(-top // 8) * 8
        for root in dict.fromkeys(info.root.values()):
            layout.slots[root] = top
            top += 8 * max(len(graph.tensors[root].shape), 1)
    layout.checks = run_checks(graph)
    if layout.checks:
        top = -(-top // 8) * 8
        layout.status_offset = top
        top += 8
    need = max((scratch or {}).values(), default=0)
    if need:
        top = -(-top // alignment) * alignment
        layout.scratch_offset, layout.scratch_bytes = top, int(need)
        top += int(need)
    layout.arena_bytes = top
    for name in graph.outputs:
        if name in info.root:
            layout.output_slots.append(layout.slots[info.root[name]])
            layout.output_dims.append(info.dims[name])
        else:
            layout.output_slots.append(-1)
            layout.output_dims.append(())
    return layout
