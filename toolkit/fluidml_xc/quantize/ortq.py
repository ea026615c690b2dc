"""ONNX Runtime's post-training quantization (onnxruntime.quantization): pre-processing, a calibration
reader over our samples, quantize_static (QDQ / QOperator) or quantize_dynamic."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ..errors import InputError
from .data import Samples
from .progress import progress_bar

FORMATS = ("qdq", "qoperator")
METHODS = ("minmax", "entropy", "percentile")
QTYPES = ("int8", "uint8")

QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
                           "QGemm", "QAttention", "DynamicQuantizeMatMul", "MatMulNBits", "MatMulIntegerToFloat"})


@dataclass(frozen=True)
class QuantConfig:
    """What onnxruntime.quantization is asked to do."""

    format: str = "qdq"
    method: str = "minmax"
    per_channel: bool = False
    dynamic: bool = False
    activation_type: str | None = None
    """int8 or uint8; None: int8 for QDQ (ORT's recommendation), uint8 for QOperator (u8s8 on x86)."""
    weight_type: str = "int8"
    reduce_range: bool = False
    """7-bit weights (int8 within +-64): exact vpmaddubsw pair sums on x86 without VNNI, ours (kernels/qgemm.py
    PAIR_SUM_LIMIT) and ORT's alike."""
    exclude: tuple[str, ...] = ()
    """node names or op types left in float"""
    extra_options: dict = field(default_factory=dict)


def check_not_quantized(model: onnx.ModelProto, path: str) -> None:
    found = sorted({n.op_type for n in model.graph.node if n.op_type in QUANTIZED_OPS or n.op_type.startswith("QLinear")})
    if found:
        raise InputError(f"{path} is already quantized (it has {', '.join(found)}); pass the float model it was made from")


def _exclusions(model: onnx.ModelProto, exclude: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(node names, op types) from --exclude values: a node's name first, else an op type of the model."""
    names = {n.name for n in model.graph.node if n.name}
    types = {n.op_type for n in model.graph.node}
    nodes, op_types = [], []
    for item in exclude:
        if item in names:
            nodes.append(item)
        elif item in types:
            op_types.append(item)
        else:
            sample = ", ".join(sorted(types))
            raise InputError(f"--exclude {item!r}: no node or op type of that name in the model (op types: {sample}); "
                             "`--explain` lists node names")
    return nodes, op_types


QOPERATOR_CONTRIB = frozenset({"Add", "Mul", "AveragePool", "GlobalAveragePool", "Concat", "Gemm", "LeakyRelu", "Sigmoid",
                               "Softmax", "Where", "EmbedLayerNormalization"})
"""Op types whose QOperator form is an ONNX Runtime contrib op (com.microsoft QLinearAdd, QGemm, ...): not
standard ONNX, so fluidml-xc cannot build them; in --format qoperator they stay float between
QuantizeLinear/DequantizeLinear (QLinearConv, QLinearMatMul and the int8 data-movement ops are standard)."""


def _op_types(config: QuantConfig, excluded: list[str]) -> list[str] | None:
    """The op types ORT's quantizer may quantize in this mode, minus the excluded types (None: ORT's default)."""
    from onnxruntime.quantization.registry import IntegerOpsRegistry, QDQRegistry, QLinearOpsRegistry

    if config.dynamic:
        registry, drop = IntegerOpsRegistry, set()
    elif config.format == "qoperator":
        registry, drop = QLinearOpsRegistry, set(QOPERATOR_CONTRIB)
    else:
        registry, drop = QDQRegistry, set()
    if not excluded and not drop:
        return None
    return sorted(t for t in registry if t not in excluded and t not in drop)


class _Reader:
    """A CalibrationDataReader over the samples, with a progress bar (progress.py)."""

    def __init__(self, samples: Samples, label: str, progress: bool | None = None):
        self.samples, self.label, self.progress, self.index, self.bar = samples, label, progress, 0, None

    def get_next(self):
        if self.bar is None:
            self.bar = progress_bar(len(self.samples), self.label, self.progress)
        if self.index >= len(self.samples):
            self.bar.close()
            return None
        feed = self.samples.feeds[self.index]
        self.index += 1
        self.bar.update(1)
        return feed

    def rewind(self):
        self.index = 0
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __iter__(self):
        return self

    def __next__(self):
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item

    def __len__(self):
        return len(self.samples)


@contextmanager
def _quiet_logging():
    """onnxruntime.quantization warns through the root logger about its own internal choices (per-channel
    axes of 1-D weights, format advice): not the user's problem, so not printed."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def _ort_error(stage: str, exc: Exception | str) -> InputError:
    from .inputs import clean

    return InputError(f"onnxruntime.quantization {stage} failed: {clean(str(exc)) or type(exc).__name__}")


class _Collect(logging.Handler):
    """The ERROR records onnxruntime.quantization logs (a failed step it then carries on past, with a traceback)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def preprocess(src: Path, dst: Path) -> None:
    """quant_pre_process: ORT's graph optimizations + ONNX shape inference (shapes are static by then). Its
    optimization step logs a failure and a traceback and goes on: that is an error here, one line of ours."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    logger = logging.getLogger("onnxruntime.quantization")
    collect, propagate = _Collect(), logger.propagate
    logger.addHandler(collect)
    logger.propagate = False
    try:
        with _quiet_logging():
            quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
    except Exception as exc:  # ORT raises plain exceptions of many kinds for models it cannot process
        raise _ort_error("pre-processing", exc) from None
    finally:
        logger.removeHandler(collect)
        logger.propagate = propagate
    if collect.messages:
        raise _ort_error("pre-processing", collect.messages[-1])


def quantize(src: Path, dst: Path, config: QuantConfig, calibration: Samples,
             progress: bool | None = None) -> None:
    """Quantize `src` (pre-processed by `preprocess`) into `dst` (static with the calibration samples, or dynamic)."""
    if config.format not in FORMATS or config.method not in METHODS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)} and --method one of {', '.join(METHODS)}")
    model = onnx.load(str(src), load_external_data=False)
    nodes, op_types = _exclusions(model, config.exclude)
    try:
        with _quiet_logging():
            _run(src, dst, config, calibration, progress, nodes, op_types)
    except InputError:
        raise
    except Exception as exc:
        raise _ort_error("quantize_dynamic" if config.dynamic else "quantize_static", exc) from None


def _run(src: Path, dst: Path, config: QuantConfig, calibration: Samples, progress: bool | None,
         nodes: list[str], op_types: list[str]) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    qtype = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    if config.dynamic:
        quantize_dynamic(str(src), str(dst), op_types_to_quantize=_op_types(config, op_types), per_channel=config.per_channel,
                         reduce_range=config.reduce_range, weight_type=qtype[config.weight_type], nodes_to_exclude=nodes or None,
                         extra_options=dict(config.extra_options) or None)
        return
    activation = config.activation_type or ("int8" if config.format == "qdq" else "uint8")
    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[config.method]
    fmt = QuantFormat.QDQ if config.format == "qdq" else QuantFormat.QOperator
    reader = _Reader(calibration, f"calibrating ({config.method})", progress)
    quantize_static(str(src), str(dst), reader, quant_format=fmt, op_types_to_quantize=_op_types(config, op_types),
                    per_channel=config.per_channel, reduce_range=config.reduce_range, activation_type=qtype[activation],
                    weight_type=qtype[config.weight_type],
                    nodes_to_exclude=nodes or None, calibrate_method=method,
                    extra_options=dict(config.extra_options) or None)
