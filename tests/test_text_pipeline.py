"""Text classifiers (issue #29): com.microsoft Tokenizer (ops/tokenizer.py, kernels/regex_search.py), TfIdfVectorizer
over string pools (frontend/tfidf.py, ops/tfidf_ids.py), their fusion (passes/token_ids.py) and scikit-learn's
TfidfVectorizer / CountVectorizer pipelines exported by skl2onnx with its default options, against ONNX Runtime:
JIT on x86_64, runners on x86_64 and under qemu for aarch64 and armv7; the one-line errors of what is refused.

ONNX Runtime's StringNormalizer needs an installed locale: the reference models get locale C.UTF-8 (ours reads
no locale, docs/STRINGS.md)."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper

from fluidml_xc.errors import InputError, RunCheckFailed
from fluidml_xc.frontend.ranges import ShapeRanges
from fluidml_xc.kernels.regex_search import compile_search
from fluidml_xc.run.backend import FxcBackend
from fluidml_xc.run.execute import run_artifact
from modelrun import build, jit_run, require_emulator

V = helper.make_tensor_value_info
TEXTS = ["The cat sat on the mat.", "Dogs are great, dogs bark!", "Café au lait, s'il vous plaît", "",
         "x_1 über-naïve 日本語 テスト", "  ", "ab\ncd\n", "émile,a,bb,ccc", "!!!?...", "A1 b2  c3\td4"]
DOCS = ["The cat sat on the mat.", "Dogs are great, dogs bark!", "Café au lait, s'il vous plaît", "",
        "cats and dogs and mats", "a b c", "Hello world hello", "naïve café, über cats!!", "the the the dog",
        "mat? cat; dog: bird.", "Dog eat dog world", "un café, deux cafés"]
DOC_LABELS = ["cat", "dog", "fr", "none", "cat", "none", "dog", "fr", "dog", "cat", "dog", "fr"]
QUERIES = ["the dog and the cat", "", "CAFÉ AU LAIT", "!!!", "über naïve dogs bark at cats on mats", "zzz qqq",
           "Hello, hello world.", "dog dog dog dog"]
BOARDS = ["x86_64", pytest.param("qemu-aarch64", marks=pytest.mark.qemu), pytest.param("qemu-armv7", marks=pytest.mark.qemu)]


def _ort(model: onnx.ModelProto, feeds: dict) -> list:
    import onnxruntime
    for node in model.graph.node:
        if node.op_type == "StringNormalizer" and not any(a.name == "locale" for a in node.attribute):
            node.attribute.append(helper.make_attribute("locale", "C.UTF-8"))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def tokenizer_model(count: int, **attributes) -> onnx.ModelProto:
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", **attributes)
    graph = helper.make_graph([node], "tok", [V("x", TP.STRING, [count])], [V("y", TP.STRING, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def _same_tokens(got: np.ndarray, want: np.ndarray, pad: str) -> None:
    """ONNX Runtime's rows, then our extra padding (its width is the batch's most tokens, ours the bound)."""
    width = want.shape[-1]
    assert got.shape[:-1] == want.shape[:-1] and got.shape[-1] >= width, (got.shape, want.shape)
    assert got[..., :width].tolist() == want.tolist()
    assert all(v == pad for v in got[..., width:].ravel())


@pytest.mark.parametrize("pattern", ["[a-zA-Z0-9_]+", r"\b\w\w+\b", r"\w+", r"[^ ,.]+", r"\pL+", "a*", r"(?m)^\w+",
                                     r"\b", "ab|abc|c", r"\S+", r"(?i)CAF\w"])
@pytest.mark.parametrize("mincharnum", [1, 2, 3])
def test_search_automaton_finds_onnxruntime_tokens(pattern, mincharnum):
    """The search automaton's reference loop (the kernel's) gives ONNX Runtime's tokens (RE2 leftmost-longest)."""
    want = _ort(tokenizer_model(len(TEXTS), mark=0, pad_value="#", tokenexp=pattern, mincharnum=mincharnum),
                {"x": np.array(TEXTS, dtype=object)})[0]
    dfa = compile_search(pattern)
    got = [[t.decode() for t in dfa.tokens(s.encode(), mincharnum)] for s in TEXTS]
    assert got == [[t for t in row if t != "#"] for row in want.tolist()]


TOKENIZERS = {
    "skl2onnx": dict(mark=0, pad_value="#", tokenexp="[a-zA-Z0-9_]+", mincharnum=1),
    "words-marked": dict(mark=1, pad_value="", tokenexp=r"\b\w\w+\b", mincharnum=1),
    "separators": dict(mark=0, pad_value="#", separators=[" ", "[.]", ",", "!", "\\?", "\n"], mincharnum=2),
    "chars": dict(mark=1, pad_value="<p>", tokenexp=".", mincharnum=1),
    "one-char-separator": dict(mark=0, pad_value="_", separators=[""], mincharnum=1),
    "letters": dict(mark=0, pad_value="", tokenexp=r"\pL{2,}", mincharnum=3),
}


@pytest.mark.parametrize("kind", list(TOKENIZERS))
def test_tokenizer_matches_onnxruntime(kind):
    attributes = TOKENIZERS[kind]
    model, feeds = tokenizer_model(len(TEXTS), **attributes), {"x": np.array(TEXTS, dtype=object)}
    _same_tokens(jit_run(model, feeds)["y"], _ort(model, feeds)[0], attributes["pad_value"])


@pytest.mark.parametrize("board", BOARDS)
def test_tokenizer_runner_matches_onnxruntime(board, tmp_path):
    require_emulator(board) if board != "x86_64" else None
    attributes = TOKENIZERS["words-marked"]
    model, feeds = tokenizer_model(len(TEXTS), **attributes), {"x": np.array(TEXTS, dtype=object)}
    artifact = build(model, tmp_path, board, profile_runner=False, ranges=ShapeRanges(max_string_bytes=63))
    _same_tokens(run_artifact(artifact, feeds).outputs["y"], _ort(model, feeds)[0], "")


def _tfidf_model(rows: int, width: int, **attributes) -> onnx.ModelProto:
    node = helper.make_node("TfIdfVectorizer", ["tokens"], ["counts"], **attributes)
    columns = max(attributes["ngram_indexes"]) + 1
    graph = helper.make_graph([node], "tfidf", [V("tokens", TP.STRING, [rows, width])], [V("counts", TP.FLOAT, [rows, columns])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("skip", [0, 2])
@pytest.mark.parametrize("grams", [(1, 1), (1, 3), (2, 3)])
def test_string_tfidf_matches_onnxruntime(mode, skip, grams):
    """A pool of unigrams, bigrams and trigrams (a token repeated across n-grams, one n-gram repeated) over rows with
    tokens outside the pool, non-ASCII and empty tokens."""
    pool = ["cat", "dog", "été", "", "mat", "cat", "dog", "dog", "cat", "été", "mat", "cat", "dog", "mat", "mat", "dog", "cat"]
    counts, indexes = [0, 5, 11], [9, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    weights = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]
    rng = np.random.default_rng(3)
    vocabulary = np.array(["cat", "dog", "été", "", "mat", "bird", "Cat"], dtype=object)
    tokens = vocabulary[rng.integers(0, len(vocabulary), (6, 9))]
    model = _tfidf_model(6, 9, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skip,
                         ngram_counts=counts, ngram_indexes=indexes, pool_strings=pool, weights=weights)
    feeds = {"tokens": tokens}
    np.testing.assert_allclose(jit_run(model, feeds)["counts"], _ort(model, feeds)[0], rtol=1e-6)


def _pipeline(vectorizer: str, queries: int) -> onnx.ModelProto:
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    vec = {"tfidf": TfidfVectorizer(), "count": CountVectorizer(), "tfidf-bigrams": TfidfVectorizer(ngram_range=(1, 2))}[vectorizer]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = Pipeline([("vectorizer", vec), ("classifier", LogisticRegression(max_iter=500))]).fit(DOCS, DOC_LABELS)
        model = to_onnx(pipe, initial_types=[("text", StringTensorType([None, 1]))])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = queries
    return model


def _same_outputs(got: list, want: list) -> None:
    assert list(got[0]) == list(want[0])
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1]):
        assert sorted(g) == sorted(w)
        np.testing.assert_allclose([g[k] for k in sorted(g)], [w[k] for k in sorted(w)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("vectorizer", ["tfidf", "count", "tfidf-bigrams"])
def test_sklearn_text_pipeline_matches_onnxruntime(vectorizer):
    """StringNormalizer -> Tokenizer -> TfIdfVectorizer -> LinearClassifier (string labels) -> ZipMap, through the
    Python backend (labels as strings, ZipMap as dicts)."""
    model = _pipeline(vectorizer, len(QUERIES))
    feeds = {"text": np.array(QUERIES, dtype=object).reshape(-1, 1)}
    _same_outputs(FxcBackend.prepare(model).run(feeds), _ort(model, feeds))


@pytest.mark.parametrize("board", BOARDS)
def test_sklearn_text_pipeline_runner_matches_onnxruntime(board, tmp_path):
    require_emulator(board) if board != "x86_64" else None
    model = _pipeline("tfidf-bigrams", len(QUERIES))
    feeds = {"text": np.array(QUERIES, dtype=object).reshape(-1, 1)}
    want = _ort(model, feeds)
    got = run_artifact(build(model, tmp_path, board, profile_runner=False, ranges=ShapeRanges(max_string_bytes=127)),
                       feeds).outputs
    assert got["output_label"].tolist() == want[0].tolist()
    probabilities = np.array([[row[k] for k in sorted(row)] for row in want[1]], np.float32)
    np.testing.assert_allclose(got["output_probability"], probabilities, rtol=1e-5, atol=1e-6)


def test_more_tokens_than_the_bound_fail_the_run(tmp_path):
    model = _pipeline("tfidf", 2)
    artifact = build(model, tmp_path, profile_runner=False, ranges=ShapeRanges(max_dims={"Tokenizer": 4}))
    ok = run_artifact(artifact, {"text": np.array([["dog cat"], ["the dog"]], dtype=object)}).outputs
    assert ok["output_label"].tolist() == _ort(model, {"text": np.array([["dog cat"], ["the dog"]], dtype=object)})[0].tolist()
    with pytest.raises(RunCheckFailed, match="a string has more than 4 tokens.*--max-dim Tokenizer=N"):
        run_artifact(artifact, {"text": np.array([["a bb cc dd ee"], ["dog"]], dtype=object)})


def test_a_string_past_the_bound_fails_the_run(tmp_path):
    artifact = build(_pipeline("count", 2), tmp_path, profile_runner=False, ranges=ShapeRanges(max_string_bytes=15))
    with pytest.raises(RunCheckFailed, match="input 'text' element 1 is longer than the 15 bytes"):
        run_artifact(artifact, {"text": np.array([["dog"], ["a dog and a cat and a mat"]], dtype=object)})


@pytest.mark.parametrize("attributes,message", [
    (dict(mark=0, pad_value="#", tokenexp="a(?=b)", mincharnum=1), "lookahead"),
    (dict(mark=0, pad_value="#", separators=[" ", "ab"], mincharnum=1), "separator 'ab' matches more than one character"),
    (dict(mark=0, pad_value="#", tokenexp=".", mincharnum=2), "mincharnum 2 with one token per character"),
    (dict(mark=0, pad_value="#", tokenexp=r"(?u)\b\w\w+\b", mincharnum=1), "flag 'u' is not supported by RE2"),
    (dict(mark=0, tokenexp="a", mincharnum=1), "the pad_value attribute is missing"),
    (dict(mark=0, pad_value="#", mincharnum=1), "neither separators nor tokenexp"),
])
def test_unsupported_tokenizers_are_one_line_errors(attributes, message):
    with pytest.raises(InputError) as err:
        jit_run(tokenizer_model(2, **attributes), {"x": np.array(["ab", "c"], dtype=object)})
    assert message in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize("tokens_out", [False, True], ids=["fused", "unfused"])
def test_pad_value_in_the_pool_is_refused(tokens_out):
    """ONNX Runtime counts pad tokens up to the batch's longest row: a build-time bound cannot (fused or not)."""
    model = _pipeline("count", 2)
    tokenizer = next(n for n in model.graph.node if n.op_type == "Tokenizer")
    next(a for a in tokenizer.attribute if a.name == "pad_value").s = b"dog"
    if tokens_out:
        model.graph.output.append(V(tokenizer.output[0], TP.STRING, None))
    with pytest.raises(InputError) as err:
        jit_run(model, {"text": np.array([["dog"], ["cat"]], dtype=object)})
    assert "pad_value 'dog' maps to id" in str(err.value) and "\n" not in str(err.value), err.value


def test_pad_value_mapped_to_a_default_id_is_refused():
    """A LabelEncoder whose default_int64 is an id the TfIdfVectorizer counts would count our extra padding."""
    nodes = [helper.make_node("Tokenizer", ["text"], ["tokens"], domain="com.microsoft", mark=0, pad_value="#",
                              tokenexp="[a-z]+", mincharnum=1),
             helper.make_node("LabelEncoder", ["tokens"], ["ids"], domain="ai.onnx.ml", keys_strings=["a", "b"],
                              values_int64s=[1, 2], default_int64=0),
             helper.make_node("TfIdfVectorizer", ["ids"], ["counts"], mode="TF", min_gram_length=1, max_gram_length=1,
                              max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1, 2], pool_int64s=[0, 1, 2])]
    graph = helper.make_graph(nodes, "g", [V("text", TP.STRING, [3])], [V("counts", TP.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2),
                                                    helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(InputError) as err:
        jit_run(model, {"text": np.array(["a b c", "a", "b b b"], dtype=object)})
    assert "pad_value '#' maps to id 0" in str(err.value) and "\n" not in str(err.value), err.value


def test_tokens_as_a_graph_output_keep_the_unfused_path():
    """With the Tokenizer's output also a graph output the TokenIds fusion does not apply: the tokens are string
    slots (ONNX Runtime's rows, then padding to the bound) and the CategoryMapper maps them; same probabilities."""
    model = _pipeline("tfidf-bigrams", len(QUERIES))
    tokens = next(n for n in model.graph.node if n.op_type == "Tokenizer").output[0]
    model.graph.output.append(V(tokens, TP.STRING, None))
    feeds = {"text": np.array(QUERIES, dtype=object).reshape(-1, 1)}
    got, want = FxcBackend.prepare(model).run(feeds), _ort(model, feeds)
    _same_outputs(got[:2], want[:2])
    _same_tokens(got[2], want[2], "#")


def test_a_batch_without_tokens_matches_onnxruntime():
    """Nothing to tokenize (ONNX Runtime's tokens are then [rows, 0]): the classifier sees zero vectors."""
    model = _pipeline("tfidf-bigrams", 3)
    feeds = {"text": np.array([[""], ["!!"], ["  "]], dtype=object)}
    _same_outputs(FxcBackend.prepare(model).run(feeds), _ort(model, feeds))


def test_tokenizer_over_rows_of_strings_matches_onnxruntime():
    """A [N, C] input gives [N, C, tokens]."""
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", **TOKENIZERS["skl2onnx"])
    graph = helper.make_graph([node], "tok", [V("x", TP.STRING, [2, 3])], [V("y", TP.STRING, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    feeds = {"x": np.array([["a b", "", "ccc d,e"], ["Ünï cödé", "x", "!!"]], dtype=object)}
    _same_tokens(jit_run(model, feeds)["y"], _ort(model, feeds)[0], "#")


def test_a_large_vocabulary_matches_onnxruntime():
    """3,000 distinct words (the TokenIds hash table at 8,192 slots, with collisions) and bigrams: the counts of
    CountVectorizer as ONNX Runtime gives them."""
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import CountVectorizer
    rng = np.random.default_rng(11)
    words = sorted({"".join(rng.choice(list("abcdefghijklmnopqrstuvwxyzé"), rng.integers(2, 8))) for _ in range(3200)})[:3000]
    docs = [" ".join(rng.choice(words, rng.integers(5, 40))) for _ in range(400)]
    vectorizer = CountVectorizer(ngram_range=(1, 2)).fit(docs)
    model = to_onnx(vectorizer, initial_types=[("text", StringTensorType([None, 1]))])
    queries = [" ".join(rng.choice(words, rng.integers(0, 30))) + " unknownword" for _ in range(16)]
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = len(queries)
    feeds = {"text": np.array(queries, dtype=object).reshape(-1, 1)}
    want = _ort(model, feeds)[0]
    assert want.sum() > 100
    np.testing.assert_array_equal(FxcBackend.prepare(model).run(feeds)[0], want)
