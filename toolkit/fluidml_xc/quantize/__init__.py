"""Post-training quantization with ONNX Runtime's quantizer, checked on a board: data, quantizer, accuracy, explain, report."""
from __future__ import annotations

from .accuracy import OutputAccuracy, accuracy
from .data import Samples, load_samples
from .explain import NodeError, explain
from .ortq import FORMATS, METHODS, QTYPES, QuantConfig
from .pipeline import Figures, QuantizeOptions, QuantizeReport, run_quantize

__all__ = ["FORMATS", "METHODS", "QTYPES", "Figures", "NodeError", "OutputAccuracy", "QuantConfig", "QuantizeOptions",
           "QuantizeReport", "Samples", "accuracy", "explain", "load_samples", "run_quantize"]
