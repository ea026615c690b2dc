"""The model-zoo tests shipped inside the onnx package (onnx/backend/test/data/light) against their expected outputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests

from modelrun import build, require_emulator, run

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CASES = {case.model_name: case for case in load_model_tests(kind="real")}
NAMES = sorted(CASES)
VARIANTS = {"squeezenet", "shufflenet"}  # x86_64: these build the default board's three code variants, the rest --cpu native
QUICK = {"rpi4": ["squeezenet", "shufflenet", "bvlc_alexnet"], "rpi3": ["squeezenet"], "qemu-riscv64": ["squeezenet"],
         "qemu-riscv64-rvv": ["squeezenet"]}
SLOW = {"rpi4": NAMES, "rpi3": ["squeezenet", "shufflenet", "bvlc_alexnet", "densenet121"], "qemu-riscv64": NAMES,
        "qemu-riscv64-rvv": NAMES}


def _params():
    params = [pytest.param(name, "x86_64", id=f"{name}-x86_64") if name in VARIANTS else
              pytest.param(name, "x86_64", id=f"{name}-x86_64-native") for name in NAMES]
    for board in ("rpi4", "rpi3", "qemu-riscv64", "qemu-riscv64-rvv"):
        for name in SLOW[board]:
            marks = [] if name in QUICK[board] else [pytest.mark.slow]
            params.append(pytest.param(name, board, id=f"{name}-{board}", marks=marks))
    return params


def light_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs onnx's backend test runner feeds these models: arange(n) / n in the input's shape."""
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name,board", _params())
def test_light_model(name, board, tmp_path):
    require_emulator(board)
    case = CASES[name]
    path = LIGHT / f"light_{name}.onnx"
    model = onnx.load(str(path))
    expected = [numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_{i}.pb"))) for i in range(len(model.graph.output))]
    native = board == "x86_64" and name not in VARIANTS
    got = run(build(path, tmp_path, board, **({"cpu": "native"} if native else {})), light_inputs(model), timeout=1800)
    for vi, ref in zip(model.graph.output, expected):
        np.testing.assert_allclose(got[vi.name], ref, rtol=case.rtol, atol=case.atol)
