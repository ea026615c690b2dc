"""String tensors (docs/STRINGS.md): a small text pipeline (StringNormalizer -> LabelEncoder / CategoryMapper / Equal ->
numeric ops) against ONNX Runtime, in-process and as a runner on x86_64, aarch64 and armv7; the C API (const char *
arrays in, pointers into the arena out); untrusted bytes (invalid UTF-8, strings past --max-string-bytes, results
past it) never written out of bounds and reported as FXC_ERR_RUN."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.errors import RunCheckFailed
from fluidml_xc.frontend.ranges import ShapeRanges
from fluidml_xc.run.execute import run_artifact
from fluidml_xc.strings import capacity, from_slots, slot_dtype, to_slots
from modelrun import build, jit_run, require_emulator

C_DIR = Path(__file__).parent / "c"
WORDS = ["Cat", "DOG", "bird", "Émile", "zebra", "cat"]
V = helper.make_tensor_value_info


def text_pipeline() -> onnx.ModelProto:
    """text [6] -> lower-cased -> ids (LabelEncoder) and groups (CategoryMapper) -> score = ids * 10 + groups,
    is_cat = (norm == "cat"); the normalized text is an output too."""
    nodes = [
        helper.make_node("StringNormalizer", ["text"], ["norm"], case_change_action="LOWER", locale="C.UTF-8"),
        helper.make_node("LabelEncoder", ["norm"], ["ids"], domain="ai.onnx.ml", keys_strings=["cat", "dog", "émile"],
                         values_int64s=[1, 2, 3], default_int64=0),
        helper.make_node("CategoryMapper", ["norm"], ["groups"], domain="ai.onnx.ml", cats_strings=["bird", "cat"],
                         cats_int64s=[7, 5], default_int64=-1),
        helper.make_node("Mul", ["ids", "ten"], ["scaled"]),
        helper.make_node("Add", ["scaled", "groups"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["score"], to=TP.FLOAT),
        helper.make_node("Equal", ["norm", "cat"], ["is_cat"]),
    ]
    graph = helper.make_graph(nodes, "text", [V("text", TP.STRING, [6])],
                              [V("score", TP.FLOAT, [6]), V("is_cat", TP.BOOL, [6]), V("norm", TP.STRING, [6])],
                              [helper.make_tensor("ten", TP.INT64, [], [10]),
                               helper.make_tensor("cat", TP.STRING, [1], [b"cat"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)],
                             ir_version=10)


def ort(model: onnx.ModelProto, feeds: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in model.graph.output], session.run(None, feeds)))


def _check(got: dict, expected: dict) -> None:
    for name, want in expected.items():
        assert got[name].shape == want.shape, name
        if want.dtype == object:
            assert [str(v) for v in got[name].ravel()] == [str(v) for v in want.ravel()], name
        else:
            np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_text_pipeline_jit_matches_onnxruntime():
    model, feeds = text_pipeline(), {"text": np.array(WORDS, dtype=object)}
    expected = ort(model, feeds)
    assert expected["score"].tolist() == [15, 19, 7, 29, -1, 15] and expected["is_cat"].tolist() == [True, False, False, False, False, True]
    _check(jit_run(model, feeds), expected)


@pytest.mark.parametrize("board", ["x86_64", pytest.param("qemu-aarch64", marks=pytest.mark.qemu),
                                   pytest.param("qemu-armv7", marks=pytest.mark.qemu)])
def test_text_pipeline_runner_matches_onnxruntime(board, tmp_path):
    require_emulator(board)
    model, feeds = text_pipeline(), {"text": np.array(WORDS, dtype=object)}
    artifact = build(model, tmp_path, board, profile_runner=False, ranges=ShapeRanges(max_string_bytes=15))
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert [i["dtype"] for i in manifest["inputs"]] == ["string"] and manifest["outputs"][2]["dtype"] == "string"
    header = (artifact / "model.h").read_text()
    assert "#define FXC_MAX_STRING_BYTES 15 " in header and "valid until the next run" in header
    _check(run_artifact(artifact, feeds).outputs, ort(model, feeds))


def test_string_longer_than_the_bound_fails_the_run(tmp_path):
    """An input element past --max-string-bytes: the runner exits 3 with the glue's one line, nothing is run."""
    artifact = build(text_pipeline(), tmp_path, profile_runner=False, ranges=ShapeRanges(max_string_bytes=7))
    with pytest.raises(RunCheckFailed, match="input 'text' element 2 is longer than the 7 bytes"):
        run_artifact(artifact, {"text": np.array(["a", "b", "x" * 8, "c", "d", "e"], dtype=object)})


def _concat_model() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("StringConcat", ["a", "b"], ["y"])], "concat",
                              [V("a", TP.STRING, [2]), V("b", TP.STRING, [1])], [V("y", TP.STRING, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def test_concat_past_the_bound_fails_the_run_in_one_line(tmp_path):
    artifact = build(_concat_model(), tmp_path, profile_runner=False, ranges=ShapeRanges(max_string_bytes=7))
    ok = run_artifact(artifact, {"a": np.array(["ab", "abc"], dtype=object), "b": np.array(["defg"], dtype=object)})
    assert ok.outputs["y"].tolist() == ["abdefg", "abcdefg"]
    with pytest.raises(RunCheckFailed, match="StringConcat node .* longer than the 7 bytes .*--max-string-bytes"):
        run_artifact(artifact, {"a": np.array(["ab", "abcd"], dtype=object), "b": np.array(["defg"], dtype=object)})


def test_split_past_its_max_dim_fails_the_run(tmp_path):
    graph = helper.make_graph([helper.make_node("StringSplit", ["x"], ["parts", "counts"], delimiter=",")], "split",
                              [V("x", TP.STRING, [2])], [V("parts", TP.STRING, None), V("counts", TP.INT64, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    artifact = build(model, tmp_path, profile_runner=False, ranges=ShapeRanges(max_dims={"parts": 3}))
    got = run_artifact(artifact, {"x": np.array(["a,b", "c,,d"], dtype=object)}).outputs
    assert got["parts"].tolist() == [["a", "b", ""], ["c", "", "d"]] and got["counts"].tolist() == [2, 3]
    with pytest.raises(RunCheckFailed, match="more than 3 parts"):
        run_artifact(artifact, {"x": np.array(["a,b,c,d", "e"], dtype=object)})


def test_case_change_keeps_invalid_utf8_and_changes_latin1_letters():
    """Bytes of invalid UTF-8 are copied as they are (the case of ASCII letters around them changes); Latin-1's
    letters change case, other non-ASCII text is kept."""
    graph = helper.make_graph([helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER")], "n",
                              [V("x", TP.STRING, [3])], [V("y", TP.STRING, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    bad = b"ab\xff\xc3(z\xe2\x82"
    got = jit_run(model, {"x": np.array([bad, "àéÿ÷ ß", "日本 abc"], dtype=object)})["y"]
    assert got.tolist() == [b"AB\xff\xc3(Z\xe2\x82".decode("utf-8", "replace"), "ÀÉÿ÷ ß", "日本 ABC"]


def test_slots_round_trip_and_bound():
    dtype = slot_dtype(10)
    assert capacity(dtype) == 15 and dtype.itemsize == 24
    words = np.array([["", "é"], ["x" * 15, "日本"]], dtype=object)
    assert from_slots(to_slots(words, dtype)).tolist() == words.tolist()
    with pytest.raises(Exception, match="16 bytes, more than the 15"):
        to_slots(np.array(["x" * 16], dtype=object), dtype)


def test_c_api_strings_in_and_out(tmp_path):
    """A C program: const char * inputs (invalid UTF-8 passed through), output pointers into the arena,
    NUL-terminated; an over-long element returns FXC_ERR_RUN with a message naming it, before anything runs."""
    from fluidml_xc.emit.link import compile_c_program
    from fluidml_xc.target.boards import get_board

    artifact = build(_concat_model(), tmp_path, profile_runner=False, ranges=ShapeRanges(max_string_bytes=7))
    manifest = json.loads((artifact / "manifest.json").read_text())
    exe = compile_c_program(get_board("x86_64").target, manifest["cpu"], [C_DIR / "app_strings.c"], [artifact],
                            ["-std=c99", "-Wall", "-Wextra", "-Werror", artifact / "libmodel.a", "-lpthread"],
                            tmp_path / "app_strings")
    proc = subprocess.run([str(exe)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split(b"\n")
    assert lines[0] == b"rc=0 [ab\xff!] [\xc3(!]" and lines[1] == b"in-arena=1"
    assert lines[2].startswith(b"rc=-7 input 'a' element 1 is longer than the 7 bytes"), lines[2]


def test_cli_run_and_verify_with_strings(tmp_path):
    """`run --inputs feed.npz --outputs out.npz` (numpy 'U' in and out) and `verify` against ONNX Runtime, strings
    compared element by element."""
    from modelrun import cli

    onnx.save(text_pipeline(), str(tmp_path / "text.onnx"))
    np.savez(tmp_path / "feed.npz", text=np.array(WORDS))
    assert cli("build", "text.onnx", "-o", "art", "--max-string-bytes", "31", cwd=tmp_path).returncode == 0
    proc = cli("run", "art", "--inputs", "feed.npz", "--outputs", "out.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "out.npz")
    assert out["norm"].tolist() == ["cat", "dog", "bird", "émile", "zebra", "cat"] and out["score"].tolist()[1] == 19
    proc = cli("verify", "art", "--inputs", "feed.npz", cwd=tmp_path)
    assert proc.returncode == 0 and "equal strings" in proc.stdout + proc.stderr, proc.stderr


def labels_model() -> onnx.ModelProto:
    """A class index to its label (ArgMax -> Gather of a string table -> Unsqueeze), a string input echoed
    (Identity) and reshaped: the movement ops that take strings copy whole slots."""
    nodes = [helper.make_node("ArgMax", ["x"], ["idx"], axis=1, keepdims=0),
             helper.make_node("Gather", ["labels", "idx"], ["label"], axis=0),
             helper.make_node("Unsqueeze", ["label", "one"], ["label2"]),
             helper.make_node("Identity", ["text"], ["echo"]),
             helper.make_node("Reshape", ["text", "shape"], ["flat"])]
    graph = helper.make_graph(nodes, "labels", [V("x", TP.FLOAT, [3, 4]), V("text", TP.STRING, [2, 2])],
                              [V("label2", TP.STRING, [3, 1]), V("echo", TP.STRING, [2, 2]), V("flat", TP.STRING, [4])],
                              [helper.make_tensor("labels", TP.STRING, [4], [b"cat", b"dog", "été".encode(), b""]),
                               helper.make_tensor("one", TP.INT64, [1], [1]), helper.make_tensor("shape", TP.INT64, [1], [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("board", [None, "x86_64", pytest.param("qemu-armv7", marks=pytest.mark.qemu)])
def test_labels_from_a_string_table_match_onnxruntime(board, tmp_path):
    model = labels_model()
    feeds = {"x": np.array([[0, 1, 3, 2], [5, 0, 0, 0], [0, 0, 1, 9]], np.float32),
             "text": np.array([["a", "bb"], ["ccc", ""]], dtype=object)}
    expected = ort(model, feeds)
    assert expected["label2"].ravel().tolist() == ["été", "cat", ""]
    if board is None:
        _check(jit_run(model, feeds), expected)
        return
    require_emulator(board)
    _check(run_artifact(build(model, tmp_path, board, profile_runner=False), feeds).outputs, expected)


def test_label_encoder_binary_search_over_many_keys():
    """300 string keys (sorted by length, then bytes, at build time): every key, its neighbours and misses found as
    ONNX Runtime finds them; string values too."""
    rng = np.random.default_rng(3)
    keys = sorted({"".join(rng.choice(list("abcé"), int(rng.integers(0, 6)))) for _ in range(600)})[:300]
    probes = np.array(keys + ["zz", "abcéabc", "É"] + [k + "a" for k in keys[:20]], dtype=object)
    nodes = [helper.make_node("LabelEncoder", ["x"], ["ids"], domain="ai.onnx.ml", keys_strings=keys,
                              values_int64s=list(range(len(keys))), default_int64=-7),
             helper.make_node("LabelEncoder", ["x"], ["back"], domain="ai.onnx.ml", keys_strings=keys,
                              values_strings=[k[::-1] for k in keys], default_string="?")]
    graph = helper.make_graph(nodes, "many", [V("x", TP.STRING, [len(probes)])],
                              [V("ids", TP.INT64, [len(probes)]), V("back", TP.STRING, [len(probes)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)],
                              ir_version=10)
    expected = ort(model, {"x": probes})
    assert (expected["ids"] >= 0).sum() >= len(keys)
    _check(jit_run(model, {"x": probes}), expected)


def test_where_picks_strings():
    """Where over strings: a label where the score passes a threshold, "unknown" elsewhere (broadcast constant)."""
    graph = helper.make_graph([helper.make_node("Greater", ["x", "t"], ["c"]), helper.make_node("Where", ["c", "s", "u"], ["y"])],
                              "where", [V("x", TP.FLOAT, [2, 3]), V("s", TP.STRING, [2, 3])], [V("y", TP.STRING, [2, 3])],
                              [helper.make_tensor("t", TP.FLOAT, [], [0.5]), helper.make_tensor("u", TP.STRING, [1], [b"unknown"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": np.array([[0.1, 0.9, 0.6], [1, 0, 0.7]], np.float32),
             "s": np.array([["a", "bb", "été"], ["d", "e", ""]], dtype=object)}
    expected = ort(model, feeds)
    assert expected["y"].tolist() == [["unknown", "bb", "été"], ["d", "unknown", ""]]
    _check(jit_run(model, feeds), expected)


@pytest.mark.parametrize("delimiter", [",", "", "ab"])
def test_split_random_bytes_like_python(delimiter):
    """Random bytes, invalid UTF-8 among them, split as Python's str.split splits them (bytes decoded with
    surrogateescape, parts compared as the runner's U+FFFD-decoded text)."""
    rng = np.random.default_rng(len(delimiter))
    alphabet = [b"a", b"b", b" ", b"\t", b"\x1f", b",", b"\xff", b"\xc3", "é".encode(), b"ab"]
    texts = [b"".join(rng.choice(alphabet, int(rng.integers(0, 12)))) for _ in range(64)]
    graph = helper.make_graph([helper.make_node("StringSplit", ["x"], ["parts", "counts"], delimiter=delimiter)], "split",
                              [V("x", TP.STRING, [64])], [V("parts", TP.STRING, None), V("counts", TP.INT64, [64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    got = jit_run(model, {"x": np.array(texts, dtype=object)})
    expected = [t.decode("utf-8", "surrogateescape").split(delimiter or None) for t in texts]
    assert got["counts"].tolist() == [len(p) for p in expected]
    width = max(len(p) for p in expected)
    assert got["parts"].shape == (64, width)
    for row, parts in zip(got["parts"].tolist(), expected):
        text = [p.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for p in parts]
        assert row == text + [""] * (width - len(text))


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_case_change_like_python_on_ascii_and_latin1_letters(action):
    """Every ASCII and Latin-1 letter (Python maps them within Latin-1, ÿ and ß aside) and other text at random."""
    letters = [chr(c) for c in [*range(0x41, 0x5B), *range(0x61, 0x7B), *range(0xC0, 0xDF), *range(0xE0, 0xFF)]
               if chr(c) not in "×÷ß"] + ["日", " ", "1", "-"]
    rng = np.random.default_rng(5)
    texts = ["".join(rng.choice(letters, int(rng.integers(0, 10)))) for _ in range(128)]
    graph = helper.make_graph([helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action)], "case",
                              [V("x", TP.STRING, [128])], [V("y", TP.STRING, [128])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    got = jit_run(model, {"x": np.array(texts, dtype=object)})["y"].tolist()
    assert got == [t.upper() if action == "UPPER" else t.lower() for t in texts]


ILL_FORMED = [b"\xf5\x80\x80", b"\xe2\x82A", b"\xe0\x80\xafz", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98",
              b"\xc0\xaf", b"ok\xff\xfe", b"\xe6\x97\xa5\xe6\x9c", "Émile 日本 😀".encode()]


def test_runner_decodes_ill_formed_utf8_as_python_replace(tmp_path):
    """The runner writes string outputs as numpy 'U': each maximal ill-formed subpart becomes one U+FFFD, as
    bytes.decode("utf-8", "replace") gives (bytes F5-FF never start a character; a cut-off sequence is one)."""
    x = helper.make_tensor_value_info("x", TP.STRING, [len(ILL_FORMED)])
    y = helper.make_tensor_value_info("y", TP.STRING, [len(ILL_FORMED)])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ident", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 20)])
    artifact = build(model, tmp_path, "x86_64", profile_runner=False)
    got = run_artifact(artifact, {"x": np.array(ILL_FORMED, dtype="S")}).outputs["y"]
    assert got.tolist() == [b.decode("utf-8", "replace") for b in ILL_FORMED]
