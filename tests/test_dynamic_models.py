"""The dynamic-shape fixtures of tests/dynamic_models.py run in ONNX Runtime over their declared ranges (the minimum,
three sizes between, the maximum) with the expected output shapes, and the greedy decoder's output length follows
its input; nothing here uses fluidml-xc."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import dynamic_models as dm


def session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run(model, feeds) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in model.graph.output], session(model).run(None, feeds)))


def declared_symbols(model) -> set[str]:
    return {d.dim_param for vi in model.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}


@pytest.mark.parametrize("name", list(dm.BUILDERS))
def test_model_runs_in_ort_over_its_range(name):
    m = dm.BUILDERS[name]()
    assert declared_symbols(m.model) == set(m.ranges)
    for symbol, (lo, hi) in m.ranges.items():
        values = [v[symbol] for v in m.sizes]
        assert values[0] == lo and values[-1] == hi and len(set(values)) == 5, (symbol, values)
    s = session(m.model)
    names = [o.name for o in m.model.graph.output]
    for values in m.sizes:
        outs = dict(zip(names, s.run(None, m.feeds(values))))
        assert {k: v.shape for k, v in outs.items()} == m.output_shapes(values), values
        for k, v in outs.items():
            assert np.isfinite(v).all() and np.std(v) > 1e-3, (values, k)
    other = s.run(None, m.feeds(m.sizes[1], seed=1))[0]
    assert not np.allclose(s.run(None, m.feeds(m.sizes[1]))[0], other), "the outputs do not depend on the input"


@pytest.mark.parametrize("name", list(dm.BUILDERS))
def test_fixed_copy_is_static_and_computes_the_same(name):
    m = dm.BUILDERS[name]()
    values = m.sizes[2]
    static = m.fixed(values)
    assert not declared_symbols(static)
    feeds = m.feeds(values)
    want, got = run(m.model, feeds), run(static, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5, err_msg=k)  # ORT fuses static graphs otherwise


@pytest.mark.parametrize("name, ops", [
    ("crnn", {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "LSTM", "LogSoftmax"}),
    ("bert_encoder", {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Range", "LayerNormalization", "Erf", "Softmax"}),
    ("mobilenet_batch", {"Conv", "Clip", "Add", "GlobalAveragePool", "Flatten", "Gemm"}),
    ("cnn_hw", {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm"}),
])
def test_models_write_shapes_as_exporters_do(name, ops):
    m = dm.BUILDERS[name]()
    assert ops <= {n.op_type for n in m.model.graph.node}
    assert m.model.SerializeToString() == dm.BUILDERS[name]().model.SerializeToString(), "weights are seeded"
    if name == "crnn":
        lstm = next(n for n in m.model.graph.node if n.op_type == "LSTM")
        assert any(a.name == "direction" and a.s == b"bidirectional" for a in lstm.attribute)
    if name == "mobilenet_batch":
        groups = [a.i for n in m.model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
        assert sum(g > 1 for g in groups) == len(dm.MOBILENET_BLOCKS), "one depthwise conv per block"


def test_bert_reads_the_attention_mask():
    m = dm.bert_encoder()
    feeds = m.feeds({"seq": 17})
    full = dict(feeds, attention_mask=np.ones_like(feeds["attention_mask"]))
    a, b = run(m.model, feeds), run(m.model, full)
    assert not np.allclose(a["pooler_output"], b["pooler_output"])


@pytest.mark.parametrize("stop", [1, 2, 7, 13, 20])
def test_greedy_decoder_stops_at_the_end_token(stop):
    d = dm.greedy_decoder()
    out = run(d.model, d.feeds_stopping_at(stop))
    tokens, scores = out["tokens"], out["scores"]
    end = dm.DECODER["end"]
    assert tokens.shape == (stop, 1) and scores.shape == (stop, 1, dm.DECODER["vocab"])
    assert tokens[-1, 0] == end and end not in tokens[:-1, 0]
    np.testing.assert_array_equal(scores.argmax(axis=-1), tokens)


def test_greedy_decoder_without_end_token_runs_the_trip_count():
    d = dm.greedy_decoder()
    out = run(d.model, d.feeds_stopping_at(dm.DECODER["max_steps"] + 6))
    assert out["tokens"].shape == (dm.DECODER["max_steps"], 1)
    assert dm.DECODER["end"] not in out["tokens"]
