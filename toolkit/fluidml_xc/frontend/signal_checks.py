"""The signal ops (STFT, DFT, MelWeightMatrix, HannWindow, HammingWindow, BlackmanWindow) in the forms ONNX Runtime
runs, and no others: what ORT refuses at load or at run time while onnx's inference and onnx.reference let it through
is refused here, before the node is folded or lowered, in one line naming the fix.

- every op: the inputs bound to one type parameter of the schema share their dtype (ORT: "Type parameter (T1) bound
  to different types"): MelWeightMatrix's three integer inputs one integer type, its two edges one float type.
- windows: a build-time size must be positive.
- STFT: the signal is [batch, length] (real, as ORT reads it) or [batch, length, 1 or 2]; frame_step is positive; a
  window or frame_length gives the frame length, at most the signal length.
- MelWeightMatrix: ORT computes its matrix only when both edges fall on a spectrogram bin,
  floor((dft_length + 1) * edge / sample_rate) in [0, dft_length / 2 + 1), in float32 as ORT does (checked when the
  node is folded, its inputs all constants; frontend/mel.py expands it when the rate or an edge comes at run time).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx

from ..errors import InputError
from ..ir import Tensor

WINDOWS = ("HannWindow", "HammingWindow", "BlackmanWindow")

InputCheck = Callable[[str, str, dict, list], None]
"""check(op, node name, attrs, inputs: one Tensor per input position, None where absent)."""


def _scalar(t: Tensor | None) -> int | float | None:
    """The build-time value of a one-element input (None when absent or computed at run time)."""
    if t is None or not t.is_const or np.size(t.value) != 1:
        return None
    return np.ravel(t.value)[0].item()


def check_type_binding(op: str, name: str, opset: int, inputs: list) -> None:
    """Inputs whose schema type is one type parameter have one dtype between them."""
    try:
        schema = onnx.defs.get_schema(op, opset, "")
    except onnx.defs.SchemaError:
        return
    params = {c.type_param_str for c in schema.type_constraints}
    bound: dict[str, tuple[str, np.dtype]] = {}
    for formal, t in zip(schema.inputs, inputs):
        if t is None or formal.type_str not in params:
            continue
        first = bound.setdefault(formal.type_str, (formal.name, np.dtype(t.dtype)))
        if first[1] != np.dtype(t.dtype):
            raise InputError(f"{op} node {name!r}: {first[0]} is {first[1]} but {formal.name} is {np.dtype(t.dtype)}; "
                             f"both are type {formal.type_str}: cast one of them")


def _window(op: str, name: str, attrs: dict, inputs: list) -> None:
    size = _scalar(inputs[0] if inputs else None)
    if size is not None and size <= 0:
        raise InputError(f"{op} node {name!r}: size {size} must be positive")


def _stft(op: str, name: str, attrs: dict, inputs: list) -> None:
    inputs = inputs + [None] * (4 - len(inputs))
    signal, step_t, window, length_t = inputs[:4]
    shape = signal.shape
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[2] not in (1, 2)):
        raise InputError(f"STFT node {name!r}: the signal must be [batch, length] or [batch, length, 1 or 2] "
                         f"(real or complex), not {list(shape)}")
    step = _scalar(step_t)
    if step is not None and step <= 0:
        raise InputError(f"STFT node {name!r}: frame_step {step} must be positive")
    if window is None and length_t is None:
        raise InputError(f"STFT node {name!r}: neither a window nor frame_length gives the frame length: pass one")
    length = _scalar(length_t) if length_t is not None else (window.shape[0] if len(window.shape) == 1 else None)
    if length is not None and not 0 < length <= shape[1]:
        raise InputError(f"STFT node {name!r}: frame length {length} must be between 1 and the signal length {shape[1]}")


def _mel(op: str, name: str, attrs: dict, inputs: list) -> None:
    values = [_scalar(t) for t in inputs]
    if None in values:
        return
    _, dft_length, sample_rate, lower, upper = values
    bins = dft_length // 2 + 1
    f32 = np.float32
    with np.errstate(all="ignore"):
        for which, edge in (("lower_edge_hertz", lower), ("upper_edge_hertz", upper)):
            index = np.floor(f32(dft_length + 1) * f32(edge) / f32(sample_rate))
            if not 0 <= index < bins:
                raise InputError(f"MelWeightMatrix node {name!r}: {which} {edge:g} falls on spectrogram bin {index:g}, "
                                 f"outside the {bins} bins of dft_length {dft_length} at sample_rate {sample_rate} "
                                 f"(ONNX Runtime refuses it): keep the edges in [0, {bins * sample_rate / (dft_length + 1):g}) Hz")


INPUT_CHECKS: dict[str, InputCheck] = {"STFT": _stft, "MelWeightMatrix": _mel, **{w: _window for w in WINDOWS}}
"""op -> check of its inputs (shapes, dtypes, build-time values), run before the node is folded or lowered."""
SIGNAL_OPS = (*INPUT_CHECKS, "DFT")


def check_signal_node(op: str, name: str, opset: int, attrs: dict, inputs: list) -> None:
    """Every check above that applies to a default-domain node of type `op` (nothing for other ops)."""
    if op not in SIGNAL_OPS:
        return
    check_type_binding(op, name, opset, inputs)
    check = INPUT_CHECKS.get(op)
    if check is not None:
        check(op, name, attrs, list(inputs))
