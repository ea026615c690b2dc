"""Measured kernel costs on disk: kernel signatures and layout keys, and a JSON file per target under
$FLUIDML_XC_CACHE (default ~/.cache/fluidml-xc/costs). Board measurements (`source` names the board)
win over the host's for that target."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Mapping

import numpy as np

from ..ir import Graph, Node
from .layouts import Perm


def cache_dir() -> Path:
    root = os.environ.get("FLUIDML_XC_CACHE")
    return Path(root) / "costs" if root else Path.home() / ".cache" / "fluidml-xc" / "costs"


def target_key(triple: str, cpu: str) -> str:
    return f"{triple}--{cpu}".replace("/", "_")


def kernel_signature(graph: Graph, node: Node) -> str:
    """Op type, attributes, operand shapes/dtypes and which operands are constants (values not included)."""
    attrs = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sorted(node.attrs.items()) if not k.startswith("_")}

    def desc(name: str) -> str:
        if not name:
            return "-"
        t = graph.tensors[name]
        return f"{np.dtype(t.dtype).name}{list(t.shape)}{'c' if t.is_const else ''}"
    return f"{node.op_type}({','.join(desc(n) for n in node.inputs)})->({','.join(desc(n) for n in node.outputs)}) {json.dumps(attrs, sort_keys=True, default=str)}"


def layouts_key(graph: Graph, node: Node, layouts: Mapping[str, Perm], loop_order: str | None = None) -> str:
    parts = []
    for name in list(node.inputs) + list(node.outputs):
        parts.append("-" if not name or name not in layouts else ".".join(map(str, layouts[name])))
    return "/".join(parts) + (f"@{loop_order}" if loop_order else "")


def entry_key(signature: str, layouts: str) -> str:
    return hashlib.sha256(f"{signature}|{layouts}".encode()).hexdigest()[:32]


class CostCache:
    """JSON file per target: {"format": 1, "target": key, "entries": {key: {signature, layouts, ms, runs, source, time}}}."""

    FORMAT = 1

    def __init__(self, target: str, directory: Path | None = None):
        self.target = target
        self.path = (directory or cache_dir()) / f"{target}.json"
        self.entries: dict[str, dict] = {}
        self.dirty = False
        self.hits = self.misses = 0
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                if data.get("format") == self.FORMAT:
                    self.entries = dict(data.get("entries", {}))
            except (OSError, ValueError):
                self.entries = {}

    def get(self, signature: str, layouts: str) -> float | None:
        entry = self.entries.get(entry_key(signature, layouts))
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        return float(entry["ms"])

    def put(self, signature: str, layouts: str, ms: float, runs: int, source: str) -> None:
        key = entry_key(signature, layouts)
        old = self.entries.get(key)
        if old is not None and old.get("source", "host").startswith("board") and not source.startswith("board"):
            return  # a board's own measurement beats the host's
        self.entries[key] = {"signature": signature, "layouts": layouts, "ms": float(ms), "runs": int(runs),
                             "source": source, "time": int(time.time())}
        self.dirty = True

    def merge(self, data: dict | str | Path) -> int:
        """Accept measurements from a board (same format, possibly listing entries without keys)."""
        if not isinstance(data, dict):
            data = json.loads(Path(data).read_text())
        if data.get("format", self.FORMAT) != self.FORMAT:
            raise ValueError(f"cost cache format {data.get('format')} is not {self.FORMAT}")
        entries = data.get("entries", {})
        items = entries.values() if isinstance(entries, dict) else entries
        n = 0
        for e in items:
            source = e.get("source") or f"board:{data.get('board', 'unknown')}"
            self.put(e["signature"], e["layouts"], float(e["ms"]), int(e.get("runs", 1)), source)
            n += 1
        return n

    def save(self) -> None:
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"format": self.FORMAT, "target": self.target, "entries": self.entries}, indent=1, sort_keys=True))
        tmp.replace(self.path)
        self.dirty = False
