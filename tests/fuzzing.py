"""A seeded, bounded mutator of small ONNX models and of .npy/.npz feeds, and a worker process that runs the
CLI on each case (so a crash by signal is seen as such, and the import cost is paid once).

Model mutations: byte flips, truncations, insertions on the serialized model, and structural ones made with
onnx.helper / the protobuf API: attributes (values, types, removal, unknown ones), dims, dtypes, names,
initializer data, opsets, node inputs and op types. Feed mutations: header fields, byte flips, truncations,
zip members (duplicates, compression method, encryption flag)."""
from __future__ import annotations

import contextlib
import io
import json
import random
import select
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------------------- base models


def _finish(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def base_models() -> list[onnx.ModelProto]:
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    models = [
        _finish([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                [_vi("x", [2, 4])], [_vi("y", [2, 4])], [numpy_helper.from_array(f32(4), "b")]),
        _finish([helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=1),
                 helper.make_node("Relu", ["c"], ["r"]), helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                [_vi("x", [1, 2, 6, 6])], [_vi("y", [1, 3, 3, 3])],
                [numpy_helper.from_array(f32(3, 2, 3, 3), "W"), numpy_helper.from_array(f32(3), "B")]),
        _finish([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
                [_vi("x", [3, 5])], [_vi("y", [3, 4])], [numpy_helper.from_array(f32(5, 4), "W")]),
        _finish([helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
                 helper.make_node("Concat", ["t", "t"], ["y"], axis=0)],
                [_vi("x", [2, 3, 2])], [_vi("y", [12, 2])], [numpy_helper.from_array(np.array([6, 2], np.int64), "s")]),
        _finish([helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("ReduceMean", ["c"], ["y"], axes=[1], keepdims=0)],
                [_vi("x", [3, 4])], [_vi("y", [3])],
                [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"), numpy_helper.from_array(np.array(0.5, np.float32), "hi")],
                opset=13),
    ]
    return models


@dataclass(frozen=True)
class DynamicBase:
    """A small model with symbolic dims, built once over `ranges` (symbol -> (lo, hi)) with --dim."""
    name: str
    model: onnx.ModelProto
    ranges: dict[str, tuple[int, int]]
    inputs: dict[str, tuple[int | str, ...]]

    def dim_args(self) -> list[str]:
        return [a for s, (lo, hi) in self.ranges.items() for a in ("--dim", f"{s}={lo}..{hi}")]

    def feeds(self, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {name: rng.standard_normal([sizes[d] if isinstance(d, str) else d for d in dims]).astype(np.float32)
                for name, dims in self.inputs.items()}

    def in_range(self, feeds: dict[str, np.ndarray]) -> bool:
        """Whether float32 feeds (either byte order) of these shapes bind every symbol to one in-range size (what
        a run must accept)."""
        bound: dict[str, int] = {}
        for name, dims in self.inputs.items():
            shape = feeds[name].shape
            if len(shape) != len(dims) or feeds[name].dtype.str[1:] != "f4":
                return False
            for d, n in zip(dims, shape):
                if isinstance(d, int) and d != n or isinstance(d, str) and bound.setdefault(d, n) != n:
                    return False
        return all(lo <= bound[s] <= hi for s, (lo, hi) in self.ranges.items())


def dynamic_base_models() -> list[DynamicBase]:
    """A sequence model (MatMul, Softmax, LayerNormalization; two inputs share `seq`), an image model (Conv, MaxPool,
    AveragePool over H and W) and a batch range (Gemm over N)."""
    rng = np.random.default_rng(1)
    f32 = lambda *s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32))  # noqa: E731

    def init(name, *shape):
        tensor = f32(*shape)
        tensor.name = name
        return tensor

    seq = _finish([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "k"], ["a"]),
                   helper.make_node("Softmax", ["a"], ["s"], axis=-1),
                   helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1)],
                  [_vi("x", [1, "seq", 16]), _vi("k", [1, "seq", 8])], [_vi("y", [1, "seq", 8])],
                  [init("W", 16, 8), init("g", 8), init("b", 8)])
    image = _finish([helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["r"]),
                     helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                     helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1],
                                      count_include_pad=0)],
                    [_vi("x", [1, 2, "H", "W"])], [_vi("y", [1, 3, "Hp", "Wp"])], [init("W", 3, 2, 3, 3), init("B", 3)])
    batch = _finish([helper.make_node("Gemm", ["x", "W", "B"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["y"])],
                    [_vi("x", ["N", 8])], [_vi("y", ["N", 5])], [init("W", 5, 8), init("B", 5)])
    return [DynamicBase("sequence", seq, {"seq": (3, 20)}, {"x": (1, "seq", 16), "k": (1, "seq", 8)}),
            DynamicBase("image", image, {"H": (4, 13), "W": (4, 13)}, {"x": (1, 2, "H", "W")}),
            DynamicBase("batch", batch, {"N": (1, 5)}, {"x": ("N", 8)})]


def _with_shape(npy: bytes, shape: tuple[int, ...]) -> bytes:
    """The .npy file `npy` with a well-formed header claiming `shape` (its payload unchanged)."""
    source = io.BytesIO(npy)
    np.lib.format.read_magic(source)
    _, fortran, dtype = np.lib.format.read_array_header_1_0(source)
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran,
                                               "shape": shape})
    return out.getvalue() + npy[source.tell():]


def dynamic_edge_feeds(base: DynamicBase, rng: random.Random, extra: int) -> list[tuple[str, dict[str, bytes], bool]]:
    """(what, input -> .npy bytes, must run) around the edges of every range: each symbol at min-1, min, min+1,
    max-1, max, max+1 and 0 (the others in range), a huge dim in the header, a wrong rank, a fixed dim changed,
    two inputs giving a symbol two sizes, a truncated file; then `extra` mutations (tests/fuzzing.mutate_npy) of
    in-range feeds. `must run`: the feeds are in range, so the run must accept them."""
    mid = {s: (lo + hi) // 2 for s, (lo, hi) in base.ranges.items()}

    def case(what, sizes, edit=None):
        arrays = base.feeds(sizes, rng.randrange(1 << 30))
        if edit:
            edit(arrays)
        return what, {n: npy_bytes(a) for n, a in arrays.items()}, base.in_range(arrays)

    first, dims = next(iter(base.inputs.items()))
    cases = []
    for s, (lo, hi) in base.ranges.items():
        for n in sorted({lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0}):
            cases.append(case(f"{s}={n}", {**mid, s: max(n, 0)}))
    fixed = next(i for i, d in enumerate(dims) if isinstance(d, int)) if any(isinstance(d, int) for d in dims) else None
    cases.append(case("wrong rank", mid, lambda a: a.update({first: a[first][..., None]})))
    if fixed is not None:
        cases.append(case(f"fixed dim {fixed} changed", mid, lambda a: a.update({first: np.concatenate([a[first]] * 2, fixed)})))
    shared = [s for s in base.ranges if sum(s in d for d in base.inputs.values()) > 1]
    for s in shared:
        other = [n for n, d in base.inputs.items() if s in d][1]
        lo, hi = base.ranges[s]
        edit = lambda a, o=other, ax=base.inputs[other].index(s): a.update({o: np.take(a[o], range(a[o].shape[ax] - 1), ax)})
        cases.append(case(f"inputs disagree on {s}", {**mid, s: lo + 1}, edit))
    what, members, _ = case("in range", mid)
    symbol = next(i for i, d in enumerate(dims) if isinstance(d, str))
    shape = tuple(mid[d] if isinstance(d, str) else d for d in dims)
    huge = tuple(2 ** 40 if i == symbol else n for i, n in enumerate(shape))
    cases.append(("huge dim", {**members, first: _with_shape(members[first], huge)}, False))
    cases.append(("truncated .npy", {**members, first: members[first][:-7]}, False))
    for _ in range(extra):
        sizes = {s: rng.randint(lo, hi) for s, (lo, hi) in base.ranges.items()}
        what, members, _ = case("", sizes)
        name = rng.choice(sorted(members))
        members[name], what = mutate_npy(members[name], rng)
        cases.append((f"{name}: {what}", members, False))
    return cases


# ------------------------------------------------------------------------------------------- model mutations

INTS = [-(2 ** 62), -(2 ** 31), -7, -3, -2, -1, 0, 1, 2, 3, 5, 7, 64, 2 ** 31, 2 ** 40, 2 ** 62]
ELEM_TYPES = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 16, 17, 21, 23, 27, 30, 99]
OPSETS = [0, 1, 5, 6, 9, 11, 13, 17, 21, 28, 29, 999]
OPS = ["Relu", "Add", "Conv", "MatMul", "Reshape", "Softmax", "Gemm", "Transpose", "Concat", "MaxPool", "Identity",
       "Cast", "Gather", "Pad", "Expand", "ConstantOfShape", "Where", "Split", "NotAnOp"]
NAMES = ["", "x", "y", "zz", "a\nb", 'q"uote', "..", "w" * 300]


def _pick(rng: random.Random, seq):
    return seq[rng.randrange(len(seq))]


def _mutate_attribute(model, rng):
    nodes = [n for n in model.graph.node if n.attribute] or list(model.graph.node)
    node = _pick(rng, nodes)
    choice = rng.randrange(5)
    if node.attribute and choice == 0:
        attr = _pick(rng, node.attribute)
        if attr.type == onnx.AttributeProto.INT:
            attr.i = _pick(rng, INTS)
        elif attr.type == onnx.AttributeProto.INTS and attr.ints:
            attr.ints[rng.randrange(len(attr.ints))] = _pick(rng, INTS)
        elif attr.type == onnx.AttributeProto.FLOAT:
            attr.f = _pick(rng, [float("nan"), float("inf"), -1.0, 0.0, 1e30])
        return f"attribute {attr.name} value"
    if node.attribute and choice == 1:
        attr = _pick(rng, node.attribute)
        replacement = helper.make_attribute(attr.name, _pick(rng, ["text", 1.5, [1, 2, 3], 4]))
        node.attribute.remove(attr)
        node.attribute.append(replacement)
        return f"attribute {attr.name} type"
    if node.attribute and choice == 2:
        node.attribute.remove(_pick(rng, node.attribute))
        return "attribute removed"
    key = _pick(rng, ["group", "axis", "perm", "auto_pad", "kernel_shape", "strides", "pads", "keepdims", "alpha", "bogus"])
    value = _pick(rng, [_pick(rng, INTS), [_pick(rng, INTS), _pick(rng, INTS)], "SAME_UPPER", "WRONG", 0.5])
    for attr in list(node.attribute):
        if attr.name == key:
            node.attribute.remove(attr)
    node.attribute.append(helper.make_attribute(key, value))
    return f"attribute {key} set"


def _mutate_dims(model, rng):
    target = _pick(rng, [*model.graph.input, *model.graph.output, *model.graph.initializer])
    dim_value = _pick(rng, [0, -1, 1, 3, 7, 2 ** 31, 2 ** 40, 2 ** 62])
    if isinstance(target, onnx.TensorProto):
        if target.dims:
            target.dims[rng.randrange(len(target.dims))] = dim_value
        else:
            target.dims.append(dim_value)
        return "initializer dims"
    dims = target.type.tensor_type.shape.dim
    if dims and rng.random() < 0.8:
        dim = dims[rng.randrange(len(dims))]
        if rng.random() < 0.2:
            dim.dim_param = "N"
        else:
            dim.dim_value = dim_value
    else:
        dims.add().dim_value = dim_value
    return "value dims"


def _mutate_dtype(model, rng):
    elem = _pick(rng, ELEM_TYPES)
    target = _pick(rng, [*model.graph.input, *model.graph.output, *model.graph.initializer])
    if isinstance(target, onnx.TensorProto):
        target.data_type = elem
        return "initializer dtype"
    target.type.tensor_type.elem_type = elem
    return "value dtype"


def _mutate_name(model, rng):
    node = _pick(rng, model.graph.node)
    name = _pick(rng, NAMES)
    where = rng.randrange(4)
    if where == 0 and node.input:
        node.input[rng.randrange(len(node.input))] = name
    elif where == 1 and node.output:
        node.output[rng.randrange(len(node.output))] = name
    elif where == 2:
        node.name = name
    else:
        _pick(rng, [*model.graph.input, *model.graph.output]).name = name
    return "name"


def _mutate_initializer(model, rng):
    if not model.graph.initializer:
        return _mutate_dims(model, rng)
    init = _pick(rng, model.graph.initializer)
    try:
        array = numpy_helper.to_array(init)
    except Exception:  # an earlier mutation of this case broke it already
        array = np.zeros(0, np.int8)
    choice = rng.randrange(4)
    if choice == 0:
        init.raw_data = init.raw_data[:rng.randrange(len(init.raw_data) + 1)] if init.raw_data else b"\0"
    elif choice == 1:
        init.raw_data = init.raw_data + bytes(rng.randrange(1, 9))
    elif choice == 2 and array.dtype == np.float32 and array.size:
        flat = array.ravel().copy()
        flat[rng.randrange(flat.size)] = _pick(rng, [np.nan, np.inf, -np.inf, 3e38])
        init.CopyFrom(numpy_helper.from_array(flat.reshape(array.shape), init.name))
    else:
        init.ClearField("raw_data")
        init.float_data.extend([1.0] * rng.randrange(3))
    return "initializer data"


def _mutate_opset(model, rng):
    if rng.random() < 0.8:
        model.opset_import[0].version = _pick(rng, OPSETS)
    else:
        model.opset_import.append(helper.make_opsetid(_pick(rng, ["com.example", "ai.onnx.ml", ""]), _pick(rng, OPSETS)))
    return "opset"


def _mutate_node(model, rng):
    node = _pick(rng, model.graph.node)
    choice = rng.randrange(4)
    if choice == 0:
        node.op_type = _pick(rng, OPS)
    elif choice == 1 and node.input:
        del node.input[rng.randrange(len(node.input))]
    elif choice == 2:
        node.input.append(_pick(rng, ["x", "", "W", "missing"]))
    else:
        model.graph.node.remove(node)
    return "node"


STRUCTURAL = [_mutate_attribute, _mutate_dims, _mutate_dtype, _mutate_name, _mutate_initializer, _mutate_opset, _mutate_node]


def mutate_model(base: onnx.ModelProto, rng: random.Random) -> tuple[bytes, str]:
    """One mutated model (serialized) and what was done to it."""
    model = onnx.ModelProto()
    model.CopyFrom(base)
    kind = rng.random()
    if kind < 0.55:
        what = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            if not model.graph.node:
                break
            what.append(_pick(rng, STRUCTURAL)(model, rng))
        return model.SerializeToString(), "+".join(what) or "empty"
    data = bytearray(model.SerializeToString())
    if kind < 0.8:
        for _ in range(rng.choice([1, 2, 4, 8])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data), "byte flips"
    if kind < 0.92:
        return bytes(data[:rng.randrange(len(data))]), "truncated"
    at = rng.randrange(len(data))
    return bytes(data[:at] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))) + data[at:]), "inserted bytes"


# ------------------------------------------------------------------------------------------- feed mutations


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


HEADER_EDITS = [(b"'<f4'", b"'<f8'"), (b"'<f4'", b"'|O'"), (b"'<f4'", b"'>f4'"), (b"'<f4'", b"'<i4'"), (b"'<f4'", b"'V4'"),
                (b"False", b"True "), (b"False", b"Maybe"), (b"'shape'", b"'shapf'"), (b"(2, 4)", b"(4, 2)"),
                (b"(2, 4)", b"(100000, 100000)"), (b"(2, 4)", b"(2, -4)"), (b"(2, 4)", b"(9999999999999999999999, 1)"),
                (b"(2, 4)", b"(2, 4, 1)"), (b"(2, 4)", b"(" + b"1, " * 40 + b")"), (b"(2, 4)", b"(2,4"), (b"(2, 4)", b"(3, 4)")]


def mutate_npy(base: bytes, rng: random.Random) -> tuple[bytes, str]:
    data = bytearray(base)
    kind = rng.random()
    if kind < 0.35:
        old, new = _pick(rng, HEADER_EDITS)
        return bytes(data).replace(old, new, 1), f"header {new[:20]!r}"
    if kind < 0.5:
        for _ in range(rng.choice([1, 2, 4])):
            data[rng.randrange(min(len(data), 80))] = rng.randrange(256)
        return bytes(data), "header byte flips"
    header_end = data.index(b"\n") + 1 if b"\n" in data else len(data)
    if kind < 0.65 and header_end < len(data):
        for _ in range(rng.choice([1, 2, 4])):
            data[rng.randrange(header_end, len(data))] = rng.randrange(256)
        return bytes(data), "payload byte flips"
    if kind < 0.75:
        for _ in range(rng.choice([1, 4])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data), "byte flips"
    if kind < 0.9:
        return bytes(data[:rng.randrange(len(data))]), "truncated"
    length = int.from_bytes(data[8:10], "little")
    data[8:10] = _pick(rng, [0, 1, 0xFFFF, length + 1, length - 1]).to_bytes(2, "little")
    return bytes(data), "header length"


def mutate_npz(members: dict[str, bytes], rng: random.Random) -> tuple[bytes, str]:
    """An .npz made of `members` (name -> .npy bytes) with one mutation (of a member or of the archive)."""
    members = dict(members)
    kind = rng.random()
    what = "member"
    if kind < 0.4:
        name = _pick(rng, sorted(members))
        members[name], what = mutate_npy(members[name], rng)
    elif kind < 0.5:
        members[_pick(rng, ["zz.npy", "x", "../x.npy", "x.npy.npy"])] = _pick(rng, list(members.values()))
        what = "extra member"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED if rng.random() < 0.3 else zipfile.ZIP_STORED) as archive:
        items = list(members.items())
        if rng.random() < 0.1:
            items.append(items[0])
            what += "+duplicate"
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, data in items:
                archive.writestr(name, data)
    data = bytearray(buffer.getvalue())
    kind = rng.random()
    if kind < 0.1:
        at = data.index(b"PK\x01\x02")
        data[at + 8:at + 10] = (1).to_bytes(2, "little")
        what += "+encrypted"
    elif kind < 0.2:
        at = data.index(b"PK\x01\x02")
        data[at + 10:at + 12] = _pick(rng, [12, 14, 99]).to_bytes(2, "little")
        what += "+method"
    elif kind < 0.3:
        data = data[:rng.randrange(len(data))]
        what += "+truncated"
    elif kind < 0.4:
        data[rng.randrange(len(data))] = rng.randrange(256)
        what += "+flip"
    return bytes(data), what


# ------------------------------------------------------------------------------------------- the worker


WORKER = """
import contextlib, io, json, os, sys
sys.path.insert(0, {toolkit!r})
from fluidml_xc.cli import main
for line in sys.stdin:
    cwd, args = json.loads(line)
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException as exc:
            code = "escaped " + type(exc).__name__
    print(json.dumps([code, err.getvalue()[-20000:], os.getpid()]), flush=True)
"""


@dataclass
class Outcome:
    code: int | str
    stderr: str
    pid: int


class Worker:
    """`fluidml-xc` in a long-lived child process; a case that kills it comes back as 'signal NAME'."""

    def __init__(self, timeout: float = 300):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        code = WORKER.format(toolkit=str(ROOT / "toolkit"))
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def run(self, cwd: Path, *args: str) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        proc = self.proc
        proc.stdin.write(json.dumps([str(cwd), [str(a) for a in args]]) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                return Outcome(f"hung for {self.timeout:g} s", "", proc.pid)
            status = proc.returncode
            self.proc = None
            name = signal.Signals(-status).name if status < 0 else f"exit {status}"
            return Outcome(f"signal {name}", "", proc.pid)
        code, stderr, pid = json.loads(line)
        return Outcome(code, stderr, pid)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def one_error_line(stderr: str) -> str | None:
    """The single `fluidml-xc: error:` line of stderr, or None when stderr is anything else."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if len(lines) == 1 and lines[0].startswith("fluidml-xc: error: ") and "Traceback" not in stderr:
        return lines[0]
    return None


def oracle(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """ONNX Runtime's outputs, else onnx.reference's; None when neither accepts the model."""
    import warnings
    with warnings.catch_warnings(), np.errstate(all="ignore"), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            import onnxruntime as ort
            options = ort.SessionOptions()
            options.log_severity_level = 4
            session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
            return [np.asarray(v) for v in session.run(None, feeds)]
        except Exception:
            pass
        try:
            from onnx.reference import ReferenceEvaluator
            return [np.asarray(v) for v in ReferenceEvaluator(onnx.load_from_string(model_bytes)).run(None, feeds)]
        except Exception:
            return None


def our_temporaries(pid: int) -> list[Path]:
    import tempfile
    return sorted(Path(tempfile.gettempdir()).glob(f"fxc-*-{pid}-*"))
