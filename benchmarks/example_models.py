"""A model argument of the benchmark scripts: an ONNX file, the name of one of the repository's example models
(fluidml_xc/examples.py, written to a temporary folder), or of a model of onnx's light model zoo
(onnx/backend/test/data/light, shipped with the onnx package: light_squeezenet, light_resnet50, ...)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))


def light_model(name: str) -> Path:
    import onnx.backend.test as bt

    return Path(bt.__file__).parent / "data" / "light" / f"{name}.onnx"


def model_file(arg: str | Path) -> Path:
    """ARG as a path when it is a file, else the light model or the example model of that name."""
    import onnx
    from fluidml_xc.examples import EXAMPLES

    path = Path(arg)
    if path.is_file():
        return path
    if light_model(str(arg)).is_file():
        return light_model(str(arg))
    if str(arg) not in EXAMPLES:
        return path
    out = Path(tempfile.mkdtemp(prefix="fxc-example-")) / f"{arg}.onnx"
    onnx.save(EXAMPLES[str(arg)](), str(out))
    return out
