"""ONNX's own backend test harness (onnx.backend.test.BackendTest) over fluidml-xc's node cases, the
figure public scoreboards quote. Run it with pytest; it needs no network (only the node cases):

    python -m pytest benchmarks/onnx_backend_test.py -n 2 -q -p no:cacheprovider [--board qemu-aarch64]

`python -m fluidml_xc.conformance` counts the same cases the same way (its figure must equal this one).
"""
from __future__ import annotations

import os

import onnx.backend.test

from fluidml_xc.run.backend import FxcBackend


class _Backend(FxcBackend):
    """FxcBackend on the board named by FXC_BOARD (default: this host, in-process JIT)."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return super().prepare(model, device, board=os.environ.get("FXC_BOARD") or None, **kwargs)


backend_test = onnx.backend.test.BackendTest(_Backend, __name__)
globals().update({"OnnxBackendNodeModelTest": backend_test.test_cases["OnnxBackendNodeModelTest"]})
