"""The compiler's graph: static-shaped tensors, nodes in execution order, constants as numpy arrays."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

ONNX_DOMAINS = ("", "ai.onnx")
"""The default ONNX operator set's two spellings."""


BODY_ATTR = "_body_graph"
"""Node attribute holding the imported body Graph of a Loop run at run time (frontend/loops.py, ops/control.py)."""
MAX_TRIPS_ATTR = "_max_trips"
"""The most steps such a Loop runs (its constant trip count, else --max-dim)."""
STATES_ATTR = "_loop_states"
"""How many loop-carried values such a Loop has."""
BOUND_ATTR = "_max_dim"
"""The --max-dim name bounding such a Loop whose trip count is not a constant: a run that needs more steps fails
(FXC_ERR_RUN, ops/control.py run_check_loop) instead of stopping at the bound."""
DEFAULT_BOUND = "*"
"""The --max-dim name that bounds every data-dependent dim no --max-dim names (`--max-dim '*=N'`): a run-time Loop's
steps, the length of a Range, a window or a MelWeightMatrix computed at run time."""


def is_onnx_domain(domain: str) -> bool:
    """True for the default ONNX domain ("" or "ai.onnx"), False for ai.onnx.ml, com.microsoft, ours, ..."""
    return domain in ONNX_DOMAINS


@dataclass
class Tensor:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    value: np.ndarray | None = None
    dyn: tuple | None = None
    """Per dim: a `symbolic.Expr` where the dim varies at run time, else the int; None for a static tensor.
    `shape` is then the capacity (every dim at its maximum over the ranges) the tensor is stored and strided for."""

    @property
    def is_const(self) -> bool:
        return self.value is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass
class Node:
    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""


@dataclass
class Graph:
    name: str
    tensors: dict[str, Tensor]
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    opset: int
    structures: dict = field(default_factory=dict)
    symbols: dict = field(default_factory=dict)
    """name -> symbolic.SymRange of each dim that varies at run time (empty: every shape is static). The order
    is the order of the run-time symbol values the entry and the kernels read (`Kernel.syms`)."""
    """Sequence/optional graph inputs and outputs: {"inputs": {name: descriptor}, "outputs": {...}}
    (frontend/sequences.py); `inputs`/`outputs` list their element tensors (`name.0`, ...)."""
    precision: str = "fp32"
    """build --precision: "fp16" narrows float32 arithmetic to float16 in the passes (passes/precision.py)."""

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def unique_name(self, base: str) -> str:
        """`base`, or `base` with the first numeric suffix no tensor of the graph uses."""
        name, n = base, 0
        while name in self.tensors:
            n += 1
            name = f"{base}{n}"
        return name

    def add_tensor(self, base: str, dtype, shape, value: np.ndarray | None = None) -> str:
        """A new tensor named `base` (or `base` with a numeric suffix); a constant when `value` is given."""
        name = self.unique_name(base)
        dtype = np.dtype(dtype if value is None else value.dtype)
        self.tensors[name] = Tensor(name, dtype, tuple(int(d) for d in shape), value)
        return name

    def producers(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def activations(self) -> list[str]:
        """Names of non-constant tensors produced by nodes (candidates for the arena)."""
        return [out for node in self.nodes for out in node.outputs if out and not self.tensors[out].is_const]
