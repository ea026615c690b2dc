"""Storage-only dtypes (bfloat16, float8_*, float4_e2m1fn, float8_e8m0fnu, int4/uint4/int2/uint2): the
conversions in kernels/lowp.py bit for bit against ml_dtypes and onnx.reference where ONNX defines the
result, and against our rules (cast_rules.py, fixed tables below) where it does not, in-process (JIT)
and through artifacts under qemu-user (aarch64, armv7), and a bfloat16 model through `fluidml-xc build` / run."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from fluidml_xc import cast_rules
from fluidml_xc.artifact import read_manifest
from fluidml_xc.dtypes import compute_dtype
from fluidml_xc.kernels import lowp
from modelrun import proto_model, require_emulator

CODES = {
    "bfloat16": TensorProto.BFLOAT16, "float8_e4m3fn": TensorProto.FLOAT8E4M3FN, "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "float8_e5m2": TensorProto.FLOAT8E5M2, "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ, "float4_e2m1fn": TensorProto.FLOAT4E2M1,
    "float8_e8m0fnu": TensorProto.FLOAT8E8M0, "int4": TensorProto.INT4, "uint4": TensorProto.UINT4,
    "int2": TensorProto.INT2, "uint2": TensorProto.UINT2,
}
FLOATS = [n for n in CODES if n not in lowp.INT_FORMATS]
INTS = list(lowp.INT_FORMATS)
F8 = sorted(lowp.SATURATING)


def _dt(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name))


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _codes(name: str) -> np.ndarray:
    """Every valid stored element of the dtype (the 4- and 2-bit types keep the high bits zero)."""
    dt = _dt(name)
    count = {"float4_e2m1fn": 16, "int4": 16, "uint4": 16, "int2": 4, "uint2": 4}.get(name, 1 << (8 * dt.itemsize))
    return np.arange(count, dtype=np.uint16 if dt.itemsize == 2 else np.uint8).view(dt)


def _probes(name: str | None = None, count: int = 100_000) -> np.ndarray:
    """float32 inputs: specials, random bit patterns, random magnitudes, and (for a float dtype) every
    representable value, every midpoint between neighbours (the ties) and the floats next to them."""
    rng = np.random.default_rng(5)
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFA00000,
                         0x00000001, 0x00400000, 0x00400001, 0x00600000, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF], np.uint32)
    parts = [specials, rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32),
             (rng.standard_normal(count) * 2.0 ** rng.integers(-40, 40, count)).astype(np.float32).view(np.uint32)]
    if name in FLOATS:
        with np.errstate(all="ignore"):
            values = np.unique(_codes(name).astype(np.float64))
            values = values[np.isfinite(values)]
            mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
            exact = values.astype(np.float32)
            for v in (exact, mids):
                parts += [v.view(np.uint32), np.nextafter(v, np.float32(np.inf)).view(np.uint32),
                          np.nextafter(v, np.float32(-np.inf)).view(np.uint32)]
    return np.concatenate(parts).view(np.float32)


def _same(got: np.ndarray, want: np.ndarray, any_nan: bool = False) -> None:
    """Bit for bit; with any_nan, NaNs of a float16/32 output only need to be NaN (payloads may differ)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    differ = _bits(got).ravel() != _bits(want).ravel()
    if any_nan:
        differ &= ~(np.isnan(got.ravel()) & np.isnan(want.ravel()))
    bad = np.flatnonzero(differ)
    assert bad.size == 0, f"{bad.size} of {got.size} differ, first at {bad[:5]}: got {_bits(got).ravel()[bad[:5]]} want {_bits(want).ravel()[bad[:5]]}"


# ------------------------------------------------------------------------------------------------
# the IR conversions themselves, JIT-compiled as one loop each
# ------------------------------------------------------------------------------------------------
def _jit_map(build, in_ty, out_ty, values: np.ndarray, out_dtype) -> np.ndarray:
    import llvmlite.binding as llvm
    from llvmlite import ir

    from fluidml_xc.target.jit import jit_setup

    jit_setup()
    module = ir.Module()
    module.triple = llvm.get_process_triple()
    i64 = ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [in_ty.as_pointer(), out_ty.as_pointer(), i64]), "f")
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    b.store(build(b, b.load(b.gep(fn.args[0], [i]))), b.gep(fn.args[1], [i]))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, fn.args[2]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    tm = llvm.Target.from_triple(module.triple).create_target_machine(opt=2, jit=True)
    engine = llvm.create_mcjit_compiler(parsed, tm)
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("f"))
    values = np.ascontiguousarray(values)
    out = np.zeros(values.shape, out_dtype)
    run(values.ctypes.data, out.ctypes.data, values.size)
    return out


def _f32():
    from llvmlite import ir
    return ir.FloatType()


@pytest.mark.parametrize("name", FLOATS)
def test_decode_every_code_matches_ml_dtypes(name):
    codes = _codes(name)
    got = _jit_map(lambda b, v: lowp.decode(b, codes.dtype, v), lowp.storage_type(codes.dtype), _f32(), _bits(codes), np.float32)
    _same(got, codes.astype(np.float32))


@pytest.mark.parametrize("name", INTS)
def test_decode_small_ints(name):
    from llvmlite import ir
    codes = _codes(name)
    got = _jit_map(lambda b, v: lowp.decode(b, codes.dtype, v), ir.IntType(8), ir.IntType(8), _bits(codes), compute_dtype(codes.dtype))
    np.testing.assert_array_equal(got, codes.astype(compute_dtype(codes.dtype)))


@pytest.mark.parametrize("name", FLOATS)
def test_encode_matches_ml_dtypes_astype(name):
    dt, x = _dt(name), _probes(name)
    got = _jit_map(lambda b, v: lowp.encode(b, dt, v), _f32(), lowp.storage_type(dt), x, np.uint16 if dt.itemsize == 2 else np.uint8)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = cast_rules.e8m0_store(x) if name == "float8_e8m0fnu" else x.astype(dt)
    _same(got.view(dt), want)


def test_e8m0_store_rule_table():
    x = np.array([1.0, 1.4, 1.5, 3.0, 0.75, 2.0**-127, 2.0**-127 * 1.01, 2.0**-126, 0.0, -1.0, np.inf, np.nan, 3e38], np.float32)
    codes = [127, 127, 128, 129, 127, 0, 1, 1, 255, 255, 255, 255, 255]
    np.testing.assert_array_equal(cast_rules.e8m0_store(x).view(np.uint8), codes)


@pytest.mark.parametrize("name", F8)
def test_encode_saturating_matches_onnx_saturate_cast(name):
    dt, x = _dt(name), _probes(name)
    got = _jit_map(lambda b, v: lowp.encode(b, dt, v, True), _f32(), lowp.storage_type(dt), x, np.uint8)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = numpy_helper.saturate_cast(x, dt)
    _same(got.view(dt), want)


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_e8m0_cast_matches_onnx(saturate, mode):
    x = _probes("float8_e8m0fnu")
    got = _jit_map(lambda b, v: lowp.e8m0_cast(b, v, saturate, mode), _f32(), lowp.storage_type(np.uint8), x, np.uint8)
    _same(got.view(ml_dtypes.float8_e8m0fnu), numpy_helper.to_float8e8m0(x, saturate, mode))


@pytest.mark.parametrize("name", FLOATS)
def test_every_code_round_trips(name):
    codes = _codes(name)
    values = codes.astype(np.float32)
    got = _jit_map(lambda b, v: lowp.encode(b, codes.dtype, v), _f32(), lowp.storage_type(codes.dtype), values,
                   np.uint16 if codes.dtype.itemsize == 2 else np.uint8)
    keep = ~np.isnan(values)
    np.testing.assert_array_equal(got[keep], _bits(codes)[keep])


# ------------------------------------------------------------------------------------------------
# ONNX models through the compiler vs onnx.reference
# ------------------------------------------------------------------------------------------------
OPSET = 25


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    return proto_model(nodes, inputs, outputs, initializers, (("", OPSET),), ir_version=None, name="lowp", check=True)


def _reference(model, feeds) -> list[np.ndarray]:
    """onnx.reference with our rules for the casts ONNX leaves undefined (cast_rules.py)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model, new_ops=cast_rules.REFERENCE_OPS).run(None, feeds)


# float -> integer, every case ONNX leaves undefined: NaN -> 0, truncation, saturation (docs/INTERNALS.md)
RULE_INPUTS = np.array([-20, -9, -8.5, -7.6, -2.5, -0.5, 0.5, 2.7, 7.5, 8, 15.5, 16, 300, 3e9, 1e20,
                        np.nan, np.inf, -np.inf, -0.0], np.float32)
RULE_TABLE = {
    "int4": [-8, -8, -8, -7, -2, 0, 0, 2, 7, 7, 7, 7, 7, 7, 7, 0, 7, -8, 0],
    "uint4": [0, 0, 0, 0, 0, 0, 0, 2, 7, 8, 15, 15, 15, 15, 15, 0, 15, 0, 0],
    "int2": [-2, -2, -2, -2, -2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, -2, 0],
    "uint2": [0, 0, 0, 0, 0, 0, 0, 2, 3, 3, 3, 3, 3, 3, 3, 0, 3, 0, 0],
    "int8": [-20, -9, -8, -7, -2, 0, 0, 2, 7, 8, 15, 16, 127, 127, 127, 0, 127, -128, 0],
    "uint8": [0, 0, 0, 0, 0, 0, 0, 2, 7, 8, 15, 16, 255, 255, 255, 0, 255, 0, 0],
    "int16": [-20, -9, -8, -7, -2, 0, 0, 2, 7, 8, 15, 16, 300, 32767, 32767, 0, 32767, -32768, 0],
    "int32": [-20, -9, -8, -7, -2, 0, 0, 2, 7, 8, 15, 16, 300, 2**31 - 1, 2**31 - 1, 0, 2**31 - 1, -2**31, 0],
    "uint32": [0, 0, 0, 0, 0, 0, 0, 2, 7, 8, 15, 16, 300, 3000000000, 2**32 - 1, 0, 2**32 - 1, 0, 0],
    "int64": [-20, -9, -8, -7, -2, 0, 0, 2, 7, 8, 15, 16, 300, 3000000000, 2**63 - 1, 0, 2**63 - 1, -2**63, 0],
    "uint64": [0, 0, 0, 0, 0, 0, 0, 2, 7, 8, 15, 16, 300, 3000000000, 2**64 - 1, 0, 2**64 - 1, 0, 0],
}


@pytest.mark.parametrize("name", list(RULE_TABLE))
def test_float_to_int_rule_numpy(name):
    dt = _dt(name) if name in INTS else np.dtype(name)
    assert [int(v) for v in cast_rules.float_to_int(RULE_INPUTS, dt)] == RULE_TABLE[name]


@pytest.mark.parametrize("src", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16])
@pytest.mark.parametrize("name", list(RULE_TABLE))
def test_float_to_int_rule_jit(name, src):
    """The compiled Cast gives the rule's table for every float source (float16 / bfloat16: the inputs they hold)."""
    to = CODES[name] if name in CODES else helper.np_dtype_to_tensor_dtype(np.dtype(name))
    x = RULE_INPUTS.astype(helper.tensor_dtype_to_np_dtype(src))
    want = cast_rules.float_to_int(x.astype(np.float64), helper.tensor_dtype_to_np_dtype(to))
    if src == TensorProto.FLOAT:
        assert [int(v) for v in want] == RULE_TABLE[name]
    got = _jit(_cast_model(name, src=src, n=x.size, to=to), {"x": x})[0]
    _same(got, want)


def _cast_inputs(dst: str) -> np.ndarray:
    if dst in INTS:  # out of range and NaN included: our rule (cast_rules.py) decides what ONNX leaves undefined
        return np.concatenate([np.arange(-40, 40, 0.25), [-0.0, 0.49, -0.51, 7.99, -8.01], RULE_INPUTS]).astype(np.float32)
    return _probes(dst, count=20_000)


def _cast_cases():
    cases = []
    for dst in CODES:
        cases.append((dst, None))
        if dst in F8:
            cases.append((dst, 0))
    return cases


def _cast_model(dst: str, src: int = TensorProto.FLOAT, saturate=None, n: int = 1, round_mode=None, to: int | None = None) -> onnx.ModelProto:
    attrs = {} if saturate is None else {"saturate": saturate}
    if round_mode:
        attrs["round_mode"] = round_mode
    to = CODES[dst] if to is None else to
    node = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    return _model([node], [helper.make_tensor_value_info("x", src, [n])], [helper.make_tensor_value_info("y", to, [n])])


def _jit(model, feeds):
    from fluidml_xc.run.backend import compile_model
    return compile_model(model)(feeds)


@pytest.mark.parametrize("dst,saturate", _cast_cases())
def test_cast_float_to_lowp_jit(dst, saturate):
    x = _cast_inputs(dst)
    model = _cast_model(dst, saturate=saturate, n=x.size)
    _same(_jit(model, {"x": x})[0], _reference(model, {"x": x})[0])


@pytest.mark.parametrize("dst", F8 + ["bfloat16", "float4_e2m1fn"])
def test_cast_float16_to_lowp_jit(dst):
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    model = _cast_model(dst, src=TensorProto.FLOAT16, n=x.size)
    _same(_jit(model, {"x": x})[0], _reference(model, {"x": x})[0])


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_e8m0_round_modes_jit(mode, saturate):
    x = _probes("float8_e8m0fnu", count=20_000)
    model = _cast_model("float8_e8m0fnu", saturate=saturate, n=x.size, round_mode=mode)
    _same(_jit(model, {"x": x})[0], _reference(model, {"x": x})[0])


@pytest.mark.parametrize("src", list(CODES))
@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32])
def test_cast_lowp_to_wide_jit(src, to):
    codes = _codes(src)  # float codes -> int32 include NaN, inf and out of range: our rule
    node = helper.make_node("Cast", ["x"], ["y"], to=to)
    model = _model([node], [helper.make_tensor_value_info("x", CODES[src], [codes.size])],
                   [helper.make_tensor_value_info("y", to, [codes.size])])
    _same(_jit(model, {"x": codes})[0], _reference(model, {"x": codes})[0], any_nan=to == TensorProto.FLOAT16)


@pytest.mark.parametrize("dst", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"])
def test_quantize_dequantize_jit(dst):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 8)) * 4).astype(np.float32)
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    zp_value = {"int4": 1, "uint4": 8, "int2": -1, "uint2": 2}.get(dst, 0)
    zp = numpy_helper.from_array(np.full(3, zp_value).astype(_dt(dst)), "zp")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=0),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
                   [helper.make_tensor_value_info("q", CODES[dst], [3, 8]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
                   [numpy_helper.from_array(scale, "scale"), zp])
    for got, want in zip(_jit(model, {"x": x}), _reference(model, {"x": x})):
        _same(got, want)


def _bf16_model() -> onnx.ModelProto:
    """bfloat16 in and out: Sigmoid (elementwise: native loads/stores), a MatMul (computed in float32 between Casts)
    and a Transpose (data movement)."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12).reshape(4, 3).astype(ml_dtypes.bfloat16), "w")
    nodes = [helper.make_node("Sigmoid", ["x"], ["c"]),
             helper.make_node("MatMul", ["c", "w"], ["m"]),
             helper.make_node("Transpose", ["m"], ["y"], perm=[1, 0])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3, 2])], [w])


def _bf16_expected(x: np.ndarray) -> np.ndarray:
    """float32 math, one rounding per op (as the compiler does), from numpy."""
    xf = x.astype(np.float32)
    c = 1 / (1 + np.exp(-xf))
    c = c.astype(ml_dtypes.bfloat16).astype(np.float32)
    m = c @ np.linspace(-1, 1, 12).reshape(4, 3).astype(ml_dtypes.bfloat16).astype(np.float32)
    return m.astype(ml_dtypes.bfloat16).T


def test_bfloat16_model_jit():
    x = np.linspace(-3, 3, 8).reshape(2, 4).astype(ml_dtypes.bfloat16)
    got = _jit(_bf16_model(), {"x": x})[0]
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), _bf16_expected(x).astype(np.float32), rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------------------------------------
# artifacts: qemu-user targets and the CLI
# ------------------------------------------------------------------------------------------------
def _cross_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One model holding every conversion: float32 -> each dtype (saturating and not), each dtype's every
    code -> float32, and a bfloat16 Sigmoid."""
    x = _probes(None, count=3_000)
    xi = np.arange(-20, 20, 0.25, dtype=np.float32)
    nodes, inputs, outputs, feeds = [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size]),
                                         helper.make_tensor_value_info("xi", TensorProto.FLOAT, [xi.size])], [], {"x": x, "xi": xi}
    for name in CODES:
        src, n = ("xi", xi.size) if name in INTS else ("x", x.size)
        for sat in ([1, 0] if name in F8 else [None]):
            out = f"to_{name}_{sat}"
            nodes.append(helper.make_node("Cast", [src], [out], to=CODES[name], **({} if sat is None else {"saturate": sat})))
            outputs.append(helper.make_tensor_value_info(out, CODES[name], [n]))
        codes = _codes(name)
        inputs.append(helper.make_tensor_value_info(f"c_{name}", CODES[name], [codes.size]))
        feeds[f"c_{name}"] = codes
        nodes.append(helper.make_node("Cast", [f"c_{name}"], [f"from_{name}"], to=TensorProto.FLOAT))
        outputs.append(helper.make_tensor_value_info(f"from_{name}", TensorProto.FLOAT, [codes.size]))
    nodes.append(helper.make_node("Sigmoid", ["c_bfloat16"], ["sigmoid"]))
    outputs.append(helper.make_tensor_value_info("sigmoid", TensorProto.BFLOAT16, [1 << 16]))
    return _model(nodes, inputs, outputs), feeds


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_conversions_bit_exact_under_qemu(board, tmp_path):
    require_emulator(board)
    from fluidml_xc.run.backend import compile_model

    model, feeds = _cross_model()
    want = _reference(model, feeds)
    names = [o.name for o in model.graph.output]
    got = compile_model(model, board=board, workdir=tmp_path)(feeds)
    for name, g, w in zip(names, got, want):
        if name == "sigmoid":  # float32 math (an exp approximation) vs numpy; the NaN inputs left out
            keep = ~np.isnan(feeds["c_bfloat16"].astype(np.float32))
            np.testing.assert_allclose(g.astype(np.float32)[keep], w.astype(np.float32)[keep], rtol=1e-2, atol=1e-2, err_msg=name)
            continue
        _same(g, w)
    # and the same on this machine, in-process, bit for bit with the emulated target
    host = _jit(model, feeds)
    for name, g, h in zip(names, got, host):
        if name != "sigmoid":
            _same(g, h)


def test_bfloat16_model_cli_build_and_run(tmp_path):
    model = _bf16_model()
    path = tmp_path / "bf16.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "artifact"
    toolkit = str(Path(__file__).resolve().parent.parent / "toolkit")
    env_cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {toolkit!r}); from fluidml_xc.cli import main; sys.exit(main())"]
    subprocess.run([*env_cmd, "build", str(path), "-o", str(out), "--no-profile-runner"], check=True, capture_output=True, cwd=tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["dtype"] == "bfloat16" and manifest["outputs"][0]["dtype"] == "bfloat16"
    assert "FXC_DTYPE_BFLOAT16 = 16" in (out / "model.h").read_text()
    x = np.linspace(-3, 3, 8).reshape(2, 4).astype(ml_dtypes.bfloat16)
    np.savez(tmp_path / "feeds.npz", x=x)
    subprocess.run([*env_cmd, "run", str(out), "--inputs", str(tmp_path / "feeds.npz"), "--outputs", str(tmp_path / "out.npz")],
                   check=True, capture_output=True, cwd=tmp_path)
    with np.load(tmp_path / "out.npz") as npz:
        y = npz["y"].view(ml_dtypes.bfloat16)
    np.testing.assert_allclose(y.astype(np.float32), _bf16_expected(x).astype(np.float32), rtol=1e-2, atol=1e-2)
    # the runner's own filler for a bfloat16 input is mirrored by execute.random_feeds
    from fluidml_xc.run.execute import random_feeds, run_artifact
    feeds = random_feeds(read_manifest(out))
    assert feeds["x"].dtype == ml_dtypes.bfloat16
    mine = run_artifact(out, feeds).outputs["y"]
    filled = subprocess.run([str(out / "runner"), "-o", str(tmp_path / "filled.npy")], check=True, capture_output=True)
    assert filled.returncode == 0
    _same(np.load(tmp_path / "filled.npy").view(ml_dtypes.bfloat16), mine)


def test_runner_rejects_wrong_npy_dtype_for_bfloat16(tmp_path):
    model = _bf16_model()
    from fluidml_xc.build import BuildOptions, build_model
    path = tmp_path / "bf16.onnx"
    onnx.save(model, str(path))
    art = build_model(path, BuildOptions(board="x86_64", out_dir=tmp_path / "a", profile_runner=False, record_last=False)).artifact
    np.save(tmp_path / "bad.npy", np.zeros((2, 4), np.float32))
    proc = subprocess.run([str(art / "runner"), "-i", str(tmp_path / "bad.npy")], capture_output=True, text=True)
    assert proc.returncode == 2 and "bfloat16" in proc.stderr and "uint16" in proc.stderr


def test_bitcast_keeps_the_stored_bits():
    codes = _codes("bfloat16")
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.UINT16)
    model = helper.make_model(helper.make_graph([node], "bitcast", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [codes.size])],
                                                [helper.make_tensor_value_info("y", TensorProto.UINT16, [codes.size])]),
                              opset_imports=[helper.make_opsetid("", 26)])
    np.testing.assert_array_equal(_jit(model, {"x": codes})[0], _bits(codes))
    back = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)
    model = helper.make_model(helper.make_graph([back], "bitcast", [helper.make_tensor_value_info("x", TensorProto.INT8, [256])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [256])]),
                              opset_imports=[helper.make_opsetid("", 26)])
    x = np.arange(256, dtype=np.uint8).view(np.int8)
    _same(_jit(model, {"x": x})[0], x.view(ml_dtypes.float8_e4m3fn))


def test_runner_filler_matches_random_feeds_for_every_dtype(tmp_path):
    """Inputs given no -i file: the runner's filler (runtime_c/npy.c) and execute.random_feeds agree bit for bit."""
    from fluidml_xc.build import BuildOptions, build_model
    from fluidml_xc.run.execute import random_feeds

    names = list(CODES)
    nodes = [helper.make_node("Cast", [f"x_{n}"], [f"y_{n}"], to=TensorProto.FLOAT) for n in names]
    nodes += [helper.make_node("Identity", [f"x_{n}"], [f"id_{n}"]) for n in names]
    model = _model(nodes, [helper.make_tensor_value_info(f"x_{n}", CODES[n], [37]) for n in names],
                   [helper.make_tensor_value_info(f"y_{n}", TensorProto.FLOAT, [37]) for n in names]
                   + [helper.make_tensor_value_info(f"id_{n}", CODES[n], [37]) for n in names])
    path = tmp_path / "fill.onnx"
    onnx.save(model, str(path))
    art = build_model(path, BuildOptions(board="x86_64", out_dir=tmp_path / "a", profile_runner=False, record_last=False)).artifact
    manifest = read_manifest(art)
    outs = [tmp_path / f"o{i}.npy" for i in range(len(manifest.outputs))]
    subprocess.run([str(art / "runner"), *[a for o in outs for a in ("-o", str(o))]], check=True, capture_output=True)
    feeds = random_feeds(manifest)
    want = _reference(model, feeds)
    for spec, out, w in zip(manifest.outputs, outs, want):
        got = np.load(out)
        if spec.dtype != "float32":
            got = got.view(np.dtype(spec.dtype))
        _same(got, w)
    for n in names:  # the filler holds no NaN and keeps the 4-/2-bit types' high bits zero
        assert not np.isnan(feeds[f"x_{n}"].astype(np.float32)).any()
        assert (_bits(feeds[f"x_{n}"]) < (1 << (8 * _dt(n).itemsize if n not in lowp.INT_FORMATS and n != "float4_e2m1fn"
                                              else {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}[n]))).all()


def test_fused_chain_rounds_every_lowp_step():
    """Cast chains through storage-only dtypes inside one FusedElementwise kernel round at every step."""
    from fluidml_xc.pipeline import import_graph

    c = numpy_helper.from_array(np.array(0.3, ml_dtypes.bfloat16), "c")
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT8E4M3FN, saturate=0),
             helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["b", "x"], ["m"]),
             helper.make_node("Cast", ["m"], ["h"], to=TensorProto.BFLOAT16),
             helper.make_node("Add", ["h", "c"], ["s"]),
             helper.make_node("Cast", ["s"], ["i"], to=TensorProto.INT4),
             helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)]
    x = np.concatenate([np.linspace(-7.9, 7.9, 997), [np.nan, np.inf, 500.0, -1e-3]]).astype(np.float32)
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])], [c])
    graph = import_graph(model)
    assert [n.op_type for n in graph.nodes] == ["FusedElementwise"]
    got, want = _jit(model, {"x": x})[0], _reference(model, {"x": x})[0]
    _same(got, want)
