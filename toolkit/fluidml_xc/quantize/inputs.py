"""The model `quantize` hands ONNX Runtime: `--bind` inputs frozen to constants, the Ifs that settles folded to the
branch taken, every input's dims fixed (by `--input-shape`, else by the samples), all under the build's shape rules
(frontend/input_shapes.py); and ONNX Runtime's complaints about it turned into one line of ours."""
from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ..errors import InputError
from ..frontend.binding import resolve
from ..frontend.input_shapes import dims_text, resolve_shapes
from ..pipeline import bind_inputs
from ..reference import ORT_STATUS
from .constant_ifs import fold_constant_ifs


@dataclass(frozen=True)
class Prepared:
    model: onnx.ModelProto
    """Bound, constant Ifs folded, the --input-shape dims fixed."""
    bound: dict[str, np.ndarray]
    changed: bool
    """The model differs from the file (ONNX Runtime must be given a copy)."""


def _fix_dims(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    changed = False
    for vi in model.graph.input:
        if vi.name not in shapes or not vi.type.HasField("tensor_type"):
            continue
        shape = vi.type.tensor_type.shape
        if not shape.dim:  # no dims declared: as many as given (resolve_shapes checked the rank)
            shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in shapes[vi.name])
        for dim, size in zip(shape.dim, shapes[vi.name]):
            if not (dim.HasField("dim_value") and dim.dim_value == size):
                dim.Clear()
                dim.dim_value = int(size)
                changed = True
    return changed


def prepare(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]], bind: Mapping[str, object]) -> Prepared:
    """--bind and --input-shape applied with build's meaning and checks (one-line InputErrors)."""
    bound = resolve(model, bind) if bind else {}
    inputs = [vi.name for vi in model.graph.input if vi.name not in {i.name for i in model.graph.initializer}]
    for name, shape in input_shapes.items():
        if name not in inputs:
            raise InputError(f"--input-shape names {name!r}, which is not an input of the model; inputs: {', '.join(inputs)}")
        if name in bound and tuple(shape) != bound[name].shape:
            raise InputError(f"--input-shape {name}={dims_text(shape)} disagrees with the shape of its --bind value "
                             f"({dims_text(bound[name].shape) or 'scalar'}): drop the --input-shape")
    shapes = resolve_shapes(model, {**input_shapes, **{k: v.shape for k, v in bound.items()}},
                            flags={k: f"--bind {k}" for k in bound})
    if bound:
        out = fold_constant_ifs(bind_inputs(model, bound))
    else:
        out = onnx.ModelProto()
        out.CopyFrom(model)
    changed = _fix_dims(out, {k: v for k, v in shapes.items() if k not in bound})
    return Prepared(out, bound, changed or bool(bound))


def fix_to_samples(original: onnx.ModelProto, prepared: Prepared, shapes: Mapping[str, tuple[int, ...]]) -> tuple[onnx.ModelProto, bool]:
    """The prepared model with every input's dims those of the samples, checked by the shape rules (a symbol the
    samples give two sizes is refused); (model, whether it differs from the file)."""
    flags = {k: f"the samples' {k!r} (shape {dims_text(v) or 'scalar'})" for k, v in shapes.items()}
    resolve_shapes(original, {**shapes, **{k: v.shape for k, v in prepared.bound.items()}},
                   flags={**flags, **{k: f"--bind {k}" for k in prepared.bound}})
    out = onnx.ModelProto()
    out.CopyFrom(prepared.model)
    return out, _fix_dims(out, shapes) or prepared.changed


def clean(text: str) -> str:
    """ONNX Runtime's message without its status prefix, its temporary file names and traceback."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    line = re.sub(r"^[\w.]*(Error|Exception|Fail)\w*: ", "", line)
    line = ORT_STATUS.sub("", line)
    line = re.sub(r"Load model from \S+ failed:\s*", "", line)
    return re.sub(re.escape(tempfile.gettempdir().rstrip("/")) + r"/\S+", "(temporary file)", line)


def check_loads(path: Path, label: str, diagnose) -> None:
    """ONNX Runtime can load `path` (`label` names it to the user); otherwise `diagnose()` raises fluidml-xc's
    own error about the model when it finds one, else ONNX Runtime's reason, cleaned, is the error."""
    from ..reference import ort_session

    try:
        ort_session(path, 1)
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        diagnose()
        raise InputError(f"ONNX Runtime cannot load {label}: {clean(str(exc))}") from None
