"""Helpers for the hostile-input tests: run the CLI in this process and classify the result, small models."""
from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fluidml_xc.cli import main
from modelrun import proto_model


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        """The one `fluidml-xc: error:` line of a failed command (asserts exactly one line, no traceback)."""
        assert self.code != 0, self.stdout
        assert "Traceback" not in self.stderr, self.stderr
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, self.stderr
        assert lines[0].startswith("fluidml-xc: error: "), lines[0]
        return lines[0]


def xc(*args: str, cwd: Path) -> Result:
    """`fluidml-xc ARGS` in this process, in cwd; an exception escaping main() fails the test."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse: usage + error, exit 2
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(old)
    return Result(int(code), out.getvalue(), err.getvalue())


def vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset: int = 17, ir_version: int = 8) -> onnx.ModelProto:
    return proto_model(nodes, inputs, outputs, inits, (("", opset),), ir_version)


def save(m: onnx.ModelProto | bytes, path: Path) -> Path:
    Path(path).write_bytes(m if isinstance(m, bytes) else m.SerializeToString())
    return Path(path)


def add_const_model(init: onnx.TensorProto) -> onnx.ModelProto:
    """y = x + w for a [4] float input and the given initializer `w`."""
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [4])], [vi("y", [4])], [init])


def float_init(name: str = "w", n: int = 4) -> onnx.TensorProto:
    return numpy_helper.from_array(np.arange(n, dtype=np.float32), name)
