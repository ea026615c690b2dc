"""Issue 11 regressions: malformed models, arguments and feeds give one `fluidml-xc: error:` line (exit 2),
never a traceback; limits refuse absurd sizes naming the tensor; nothing is written."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hostile import add_const_model, float_init, model, save, vi, xc


def _external(tensor: onnx.TensorProto, location: str) -> onnx.TensorProto:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def _case_models(tmp: Path) -> dict[str, tuple[object, str]]:
    """name -> (model or bytes, text the error line must contain)."""
    cases = {}

    def init_with(**changes):
        t = float_init()
        for key, value in changes.items():
            setattr(t, key, value)
        return t

    cases["raw_data short"] = (add_const_model(init_with(raw_data=b"\0" * 7)), "'w'")
    cases["raw_data long"] = (add_const_model(init_with(raw_data=b"\0" * 19)), "19 bytes of raw_data")
    short = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    short.dims[:] = [4]
    cases["float_data short"] = (add_const_model(short), "'w'")
    neg = float_init()
    neg.dims[:] = [-4]
    cases["negative dims"] = (add_const_model(neg), "negative dimension")
    huge = float_init()
    huge.dims[:] = [1 << 40, 1 << 30]
    cases["huge dims"] = (add_const_model(huge), "'w'")
    cases["external file missing"] = (add_const_model(_external(float_init(), "nope.bin")), "nope.bin")
    (tmp / "short.bin").write_bytes(b"\0" * 5)
    cases["external file short"] = (add_const_model(_external(float_init(), "short.bin")), "short.bin")
    cases["external file outside"] = (add_const_model(_external(float_init(), "../../etc/passwd")), "outside")
    weights = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "W")
    for group in (0, -1, 3):
        cases[f"Conv group {group}"] = (model([helper.make_node("Conv", ["x", "W"], ["y"], group=group, name="c")],
                                              [vi("x", [1, 4, 8, 8])], [vi("y", None)], [weights]), "group")
    cases["auto_pad WRONG"] = (model([helper.make_node("Conv", ["x", "W"], ["y"], auto_pad="WRONG", group=2)],
                                     [vi("x", [1, 4, 8, 8])], [vi("y", None)], [weights]), "auto_pad")
    for elem in (0, 99):
        cases[f"elem_type {elem}"] = (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4], elem)], [vi("y", [4])]),
                                      "element type")
    cases["attribute of the wrong type"] = (model([helper.make_node("LeakyRelu", ["x"], ["y"], alpha="abc")],
                                                  [vi("x", [4])], [vi("y", [4])]), "alpha")
    cases["unknown attribute"] = (model([helper.make_node("Relu", ["x"], ["y"], foo=3)], [vi("x", [4])], [vi("y", [4])]), "foo")
    cases["Constant without a value"] = (model([helper.make_node("Constant", [], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])],
                                               [vi("x", [4])], [vi("y", [4])]), "Constant node")
    shape = numpy_helper.from_array(np.array([3, 5], np.int64), "s")
    cases["Reshape dropping a value"] = (model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                                               [vi("x", [2, 8])], [vi("y", None)], [shape]), "Reshape node 'r'")
    cases["Transpose perm repeated"] = (model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0])],
                                              [vi("x", [2, 3])], [vi("y", None)]), "perm")
    cases["Softmax axis out of range"] = (model([helper.make_node("Softmax", ["x"], ["y"], axis=5)],
                                                [vi("x", [2, 3])], [vi("y", None)]), "axis")
    cases["opset 999"] = (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])], opset=999), "opset 999")
    cases["opset 0"] = (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])], opset=0), "opset 0")
    big = numpy_helper.from_array(np.array([65536, 65536], np.int64), "s")
    cases["ConstantOfShape 65536x65536"] = (model([helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos"),
                                                   helper.make_node("Add", ["x", "c"], ["y"])],
                                                  [vi("x", [1])], [vi("y", None)], [big]), "'c'")
    cases["dimension 2^62"] = (model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1 << 62])], [vi("y", [1 << 62])]),
                               "address")
    long_typed = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    long_typed.float_data.append(5.0)
    cases["float_data long (fuzz)"] = (add_const_model(long_typed), "5 values in float_data")
    cases["a tensor written twice (fuzz)"] = (model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["y"])],
                                                    [vi("x", [4])], [vi("y", [4])]), "one producer")
    cases["Clip min not a scalar (fuzz)"] = (model([helper.make_node("Clip", ["x", "x"], ["y"])], [vi("x", [3, 4])], [vi("y", None)]),
                                             "must be a scalar")
    cases["keepdims 2^31 (fuzz)"] = (model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=2 ** 31)],
                                           [vi("x", [3, 4])], [vi("y", None)]), "0 or 1")
    cases["Softmax axis -2^62 (fuzz)"] = (model([helper.make_node("Softmax", ["x"], ["y"], axis=-(2 ** 62))],
                                                [vi("x", [3, 4])], [vi("y", None)]), "outside")
    named = model([helper.make_node("Relu", ["xQQ"], ["y"], name="NAMEX")], [vi("xQQ", [4])], [vi("y", [4])])
    cases["names not UTF-8"] = (named.SerializeToString().replace(b"xQQ", b"x\xc3("), "not valid UTF-8")
    cases["truncated file"] = (named.SerializeToString()[:-5], "not a readable ONNX model")
    return cases


CASE_NAMES = sorted(_case_models(Path("/tmp")).keys())


@pytest.mark.parametrize("case", CASE_NAMES)
def test_malformed_model_is_one_line_and_writes_nothing(tmp_path, case):
    m, expected = _case_models(tmp_path)[case]
    path = save(m, tmp_path / "m.onnx")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = xc("build", path, "-o", tmp_path / "out", "--no-profile-runner", cwd=tmp_path)
    line = result.error_line()
    assert result.code == 2, line
    assert expected in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_memory_limit_names_the_tensor_and_the_flag_raises_it(tmp_path):
    value = numpy_helper.from_array(np.array([1024, 1024], np.int64), "s")
    m = model([helper.make_node("ConstantOfShape", ["s"], ["c"], name="cos"), helper.make_node("Add", ["x", "c"], ["y"])],
              [vi("x", [1])], [vi("y", None)], [value])
    path = save(m, tmp_path / "m.onnx")
    line = xc("build", path, "-o", tmp_path / "out", "--max-memory", "1M", cwd=tmp_path).error_line()
    assert "'c'" in line and "ConstantOfShape" in line and "4.0 MiB" in line and "--max-memory" in line
    assert "bad size" in xc("build", path, "--max-memory", "lots", cwd=tmp_path).error_line()
    ok = xc("build", path, "-o", tmp_path / "out", "--max-memory", "64M", "--no-profile-runner", cwd=tmp_path)
    assert ok.code == 0, ok.stderr


def test_default_memory_limit_follows_the_board_file():
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.frontend.validate import default_max_memory, host_memory_bytes

    assert default_max_memory(get_board("rpi3")) == min(512 << 20, host_memory_bytes() // 2)
    assert default_max_memory(get_board("x86_64")) == host_memory_bytes() // 2


def test_a_32_bit_board_refuses_tensors_it_cannot_address(tmp_path):
    path = save(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1 << 30])], [vi("y", [1 << 30])]), tmp_path / "m.onnx")
    line = xc("build", path, "--board", "rpi3", "--max-memory", "1T", cwd=tmp_path).error_line()
    assert "32-bit" in line and "'x'" in line


def test_input_shape_with_too_many_or_wrong_dims(tmp_path):
    path = save(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])]), tmp_path / "m.onnx")
    assert "at most 32" in xc("build", path, "--input-shape", "x=" + "x".join(["1"] * 200), cwd=tmp_path).error_line()
    assert "rank 1" in xc("build", path, "--input-shape", "x=2x2", cwd=tmp_path).error_line()
    assert not (tmp_path / "build").exists()


@pytest.fixture(scope="module")
def relu_artifact(tmp_path_factory):
    from fluidml_xc.build import BuildOptions, build_model

    work = tmp_path_factory.mktemp("relu")
    path = save(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [4])], [vi("y", [4])]), work / "m.onnx")
    return build_model(path, BuildOptions(out_dir=work / "art", record_last=False, profile_runner=False)).artifact


def _zip_with(path: Path, member: str, data: bytes, flag_bits: int = 0, compress_type: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo(member)
        archive.writestr(info, data)
    raw = bytearray(path.read_bytes())
    # patch the local header and the central directory entry: general purpose flags and the method
    for signature, flag_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        at = raw.index(signature)
        raw[at + flag_at:at + flag_at + 2] = flag_bits.to_bytes(2, "little")
        raw[at + method_at:at + method_at + 2] = compress_type.to_bytes(2, "little")
    path.write_bytes(bytes(raw))
    return path


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_run_arguments_and_feeds_are_one_line_exit_2(tmp_path, relu_artifact):
    art = str(relu_artifact)
    good = _npy_bytes(np.ones(4, np.float32))
    (tmp_path / "x.npy").write_bytes(good)
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "big.npy").write_bytes(good.replace(b"(4,)", b"(100000, 100000)"))
    (tmp_path / "short.npy").write_bytes(good.replace(b"(4,)", b"(9,)  "))
    (tmp_path / "obj.npy").write_bytes(good.replace(b"'<f4'", b"'|O' "))
    with zipfile.ZipFile(tmp_path / "dup.npz", "w") as archive:
        with pytest.warns(UserWarning):
            archive.writestr("x.npy", good)
            archive.writestr("x.npy", good)
    _zip_with(tmp_path / "method.npz", "x.npy", good, compress_type=99)
    _zip_with(tmp_path / "encrypted.npz", "x.npy", good, flag_bits=1)
    (tmp_path / "exists.npz").write_bytes(b"mine")
    cases = [
        (["--inputs", "x.npy"], "--input NAME=FILE.npy"),
        (["--inputs", "empty.npz"], "not a valid .npz"),
        (["--inputs", "/dev/null"], "not a valid .npz"),
        (["--inputs", "dup.npz"], "twice"),
        (["--inputs", "method.npz"], "compression method 99"),
        (["--inputs", "encrypted.npz"], "encrypted"),
        (["--input", "x=big.npy"], "(100000, 100000)"),
        (["--input", "x=short.npy"], "truncated"),
        (["--input", "x=obj.npy"], "not a plain numeric type"),
        (["--input", "x=missing.npy"], "no such file"),
        (["--input", "x=x.npy", "--input", "x=x.npy"], "twice"),
        (["--timeout", "nan"], "--timeout"),
        (["--timeout", "-1"], "--timeout"),
        (["--bench", "99999999999"], "--bench"),
        (["--bench", "0"], "--bench"),
        (["--outputs", "nodir/out.npz"], "does not exist"),
        (["--outputs", str(tmp_path)], "is a directory"),
        (["--outputs", "exists.npz"], "--force"),
    ]
    for args, expected in cases:
        result = xc("run", art, *args, cwd=tmp_path)
        line = result.error_line()
        assert result.code == 2 and expected in line, (args, line)
    assert (tmp_path / "exists.npz").read_bytes() == b"mine"
    assert not (tmp_path / "nodir").exists()


def test_npy_reader_accepts_what_numpy_writes(tmp_path):
    from fluidml_xc.npyio import load_npy, load_npz

    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.asfortranarray(np.arange(6).reshape(2, 3)),
              "c": np.array(7, np.int8), "d": np.zeros((0, 3), np.float64)}
    np.savez(tmp_path / "f.npz", **arrays)
    np.savez_compressed(tmp_path / "c.npz", **arrays)
    for name in ("f.npz", "c.npz"):
        got = load_npz(tmp_path / name)
        assert got.keys() == arrays.keys()
        for key, value in arrays.items():
            np.testing.assert_array_equal(got[key], value)
            assert got[key].dtype == value.dtype and got[key].shape == value.shape
    np.save(tmp_path / "b.npy", arrays["b"])
    np.testing.assert_array_equal(load_npy(tmp_path / "b.npy"), arrays["b"])


def test_inspect_into_a_closed_pipe_exits_quietly(relu_artifact, tmp_path):
    """`fluidml-xc inspect DIR | head`: the reader is gone before the first write; no BrokenPipeError traceback."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent / "toolkit"
    code = f"import sys; sys.path.insert(0, {str(root)!r}); from fluidml_xc.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "inspect", str(relu_artifact)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.wait(timeout=120)
    assert stderr.strip() == "", stderr
    assert proc.returncode == 141


def test_runner_o_refuses_an_existing_file_like_run_outputs(relu_artifact, tmp_path):
    import subprocess
    out = tmp_path / "y.npy"
    out.write_bytes(b"mine")
    runner = str(relu_artifact / "runner")
    proc = subprocess.run([runner, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "already exists; pass --force" in proc.stderr
    assert out.read_bytes() == b"mine"
    proc = subprocess.run([runner, "-o", str(out), "--force"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert np.load(out).shape == (4,)
    fresh = tmp_path / "z.npy"
    assert subprocess.run([runner, "-o", str(fresh)], capture_output=True, timeout=60).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["y.npy", "z.npy"], "no temporary left beside the outputs"
    proc = subprocess.run([runner, "-o", str(tmp_path / "nodir" / "y.npy")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cannot create" in proc.stderr


def test_profile_and_verify_arguments_are_one_line_exit_2(relu_artifact, tmp_path):
    art = str(relu_artifact)
    cases = [("profile", art, "--local", "--timeout", "nan"), ("profile", art, "--local", "--runs", "99999999999"),
             ("profile", art, "--local", "--warmup", "-1"), ("verify", art, "--timeout", "inf"),
             ("verify", art, "--rtol", "nan"), ("deploy", art, "--host", "127.0.0.1", "--connect-timeout", "nan")]
    for args in cases:
        result = xc(*args, cwd=tmp_path)
        assert result.code == 2, (args, result.stderr)
        result.error_line()


def test_npy_headers_numpy_refuses_or_warns_about(relu_artifact, tmp_path):
    """(fuzz) A NUL byte in a .npy header's padding: numpy refuses the file, the runner's reader took it (its C
    string ended at the NUL). A header numpy parses only with its Python 2 fallback (`4L`), data short: `run` printed
    numpy's UserWarning beside its error line. Both are one line and exit 2 now."""
    import io
    import subprocess

    buffer = io.BytesIO()
    np.save(buffer, np.arange(4, dtype=np.float32))
    good = buffer.getvalue()
    nul = good.replace(b"}     ", b"}  \0  ", 1)
    with pytest.raises(ValueError):
        np.load(io.BytesIO(nul))
    (tmp_path / "nul.npy").write_bytes(nul)
    out = tmp_path / "y.npy"
    proc = subprocess.run([str(relu_artifact / "runner"), "-i", str(tmp_path / "nul.npy"), "-o", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "malformed .npy header" in proc.stderr, proc.stderr
    python2 = good.replace(b"(4,), }", b"(4L,), }", 1).replace(b"}      ", b"}     ", 1)[:-4]
    with pytest.warns(UserWarning, match="Python 2"), pytest.raises(ValueError):
        np.load(io.BytesIO(python2))
    (tmp_path / "py2.npy").write_bytes(python2)
    from modelrun import cli, one_line_error

    proc = cli("run", str(relu_artifact), "--input", "x=py2.npy", cwd=tmp_path)  # a fresh process: warnings on stderr
    assert proc.returncode == 2 and "truncated .npy data" in one_line_error(proc)
