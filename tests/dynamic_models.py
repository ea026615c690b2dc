"""The models issue #26's "Must show" names, built with onnx.helper and seeded numpy weights, each with its varying
dims declared as dim_params and its shape arithmetic written the way exporters write it (PyTorch with dynamic axes:
Shape -> Gather -> Unsqueeze -> Concat -> Reshape, 0 and -1 in Reshape targets, Range over a sequence length):

- `crnn`: a CNN + bidirectional LSTM text recognizer, input [1, 1, 32, W], W = 16..256
- `cnn_hw`: a small CNN over [1, 3, H, W], H and W = 32..160 (stride-2 padded convs, pooling, GlobalAveragePool, Gemm)
- `mobilenet_batch`: a MobileNetV2-style CNN (inverted residuals, depthwise convs, Clip(0, 6)) over [N, 3, 32, 32], N = 1..8
- `bert_encoder`: a 2-layer BERT-style encoder over input_ids / attention_mask [1, seq], seq = 8..128
- `greedy_decoder`: a greedy decoder `Loop` (at most 20 steps) that stops at an end token; its scan outputs' length
  depends on the input (`DecoderModel.feeds_stopping_at`)

Nothing here uses fluidml-xc: these are the fixtures its dynamic build is tested with (tests/test_dynamic_models.py
checks that ONNX Runtime runs each over its range).

    m = crnn()
    for values in m.sizes:                      # min, three sizes between, max: {"W": 16}, ...
        feeds = m.feeds(values)
        shapes = m.output_shapes(values)        # {"logits": (4, 1, 12)}
    m.dim_flags()                               # ["--dim", "W=16..256"]
    m.fixed({"W": 61})                          # the same graph with W = 61 declared: a static model
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
Values = dict[str, int]


@dataclass(frozen=True)
class DynamicModel:
    """A model whose inputs declare symbolic dims, the range of each symbol and what to feed at given values."""

    name: str
    model: onnx.ModelProto
    ranges: dict[str, tuple[int, int]]
    """symbol -> (min, max)"""
    sizes: tuple[Values, ...]
    """the symbol values to test at: the minimum, three between (odd, not multiples of a vector width), the maximum"""
    make_feeds: Callable[[Values, np.random.Generator], dict[str, np.ndarray]]
    shapes: Callable[[Values], dict[str, tuple[int, ...]]]

    def feeds(self, values: Values, seed: int = 0) -> dict[str, np.ndarray]:
        return self.make_feeds(values, np.random.default_rng(seed))

    def output_shapes(self, values: Values) -> dict[str, tuple[int, ...]]:
        return self.shapes(values)

    def fixed(self, values: Values) -> onnx.ModelProto:
        """A copy whose input dims are `values` (a static model of the same graph: what a per-size build compiles)."""
        return fix_dims(self.model, values)

    def dim_flags(self) -> list[str]:
        """The CLI's --dim flags for the declared ranges."""
        return [part for name, (lo, hi) in self.ranges.items() for part in ("--dim", f"{name}={lo}..{hi}")]


def fix_dims(model: onnx.ModelProto, values: Values) -> onnx.ModelProto:
    """A copy of `model` with each input dim_param in `values` set to its value; output shapes left to inference."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for vi in fixed.graph.input:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.dim_param in values:
                size = values[dim.dim_param]
                dim.Clear()
                dim.dim_value = size
    for vi in fixed.graph.output:
        if any(d.dim_param for d in vi.type.tensor_type.shape.dim):
            vi.type.tensor_type.ClearField("shape")
    return fixed


class Builder:
    """Nodes, seeded weights and constants of one graph; op() names outputs `<op><k>` in order."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int | None = None) -> str:
        fan = fan_in or int(np.prod(shape[1:])) or 1
        return self.const(name, (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan)).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs):
        self.count += 1
        names = [f"{op_type.lower()}{self.count}_{i}" if outputs > 1 else f"{op_type.lower()}{self.count}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{op_type}_{self.count}", **attrs))
        return names if outputs > 1 else names[0]

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, group: int = 1, pad: int | None = None) -> str:
        p = k // 2 if pad is None else pad
        w = self.weight(f"conv{self.count + 1}.w", (cout, cin // group, k, k))
        b = self.const(f"conv{self.count + 1}.b", (self.rng.standard_normal(cout) * 0.1).astype(np.float32))
        return self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[p] * 4, group=group)

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], name: str,
              opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests/dynamic_models.py")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m


def _dim_of(b: Builder, x: str, index: int) -> str:
    """A [1] int64 tensor holding dim `index` of x, as torch exports x.size(i): Shape -> Gather -> Unsqueeze."""
    shape = b.op("Shape", [x])
    return b.op("Unsqueeze", [b.op("Gather", [shape, b.const(f"idx{b.count}", np.array(index, np.int64))], axis=0),
                              b.const(f"axes0_{b.count}", np.array([0], np.int64))])


def _reshape_by_dims(b: Builder, x: str, source: str, dims: list[int], rest: list[int]) -> str:
    """Reshape x to [dim d of `source` for d in dims] + rest, the target built by a Concat of Shape/Gather results."""
    parts = [_dim_of(b, source, d) for d in dims] + [b.const(f"rest{b.count}", np.array(rest, np.int64))]
    return b.op("Reshape", [x, b.op("Concat", parts, axis=0)])


def _vi(name: str, elem: int, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _between(lo: int, hi: int, picks: tuple[int, int, int]) -> list[int]:
    assert lo < picks[0] < picks[1] < picks[2] < hi
    return [lo, *picks, hi]


# -- CNN + bidirectional LSTM text recognizer --------------------------------------------------------
CRNN_CLASSES = 12


def crnn(seed: int = 1) -> DynamicModel:
    b = Builder(seed)
    x = "image"
    for cin, cout, pool in ((1, 8, 2), (8, 16, 2), (16, 32, 1)):
        x = b.op("Relu", [b.conv(x, cin, cout)])
        x = b.op("MaxPool", [x], kernel_shape=[2, pool], strides=[2, pool])
    # [1, 32, 4, W'] -> [W', 1, 32, 4] -> [W', 1, 128]: x.permute(3, 0, 1, 2).reshape(w, b, -1)
    seq = b.op("Transpose", [x], perm=[3, 0, 1, 2])
    seq = _reshape_by_dims(b, seq, seq, [0, 1], [-1])
    hidden = 32
    w = b.weight("lstm.W", (2, 4 * hidden, 128), fan_in=128)
    r = b.weight("lstm.R", (2, 4 * hidden, hidden), fan_in=hidden)
    bias = b.const("lstm.B", np.zeros((2, 8 * hidden), np.float32))
    y = b.op("LSTM", [seq, w, r, bias], outputs=3, direction="bidirectional", hidden_size=hidden)[0]
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3])                          # [W', 1, 2, 32]
    y = b.op("Reshape", [y, b.const("to_t_b_2h", np.array([0, 0, -1], np.int64))])  # [W', 1, 64]
    logits = b.op("Add", [b.op("MatMul", [y, b.weight("fc.w", (2 * hidden, CRNN_CLASSES), fan_in=2 * hidden)]),
                          b.const("fc.b", np.zeros(CRNN_CLASSES, np.float32))])
    b.nodes.append(helper.make_node("LogSoftmax", [logits], ["logits"], axis=2, name="LogSoftmax_out"))
    m = b.model([_vi("image", TensorProto.FLOAT, [1, 1, 32, "W"])],
                [_vi("logits", TensorProto.FLOAT, ["T", 1, CRNN_CLASSES])], "crnn")
    return DynamicModel(
        "crnn", m, {"W": (16, 256)}, tuple({"W": w} for w in _between(16, 256, (23, 61, 130))),
        lambda v, rng: {"image": rng.random((1, 1, 32, v["W"]), dtype=np.float32)},
        lambda v: {"logits": (v["W"] // 2 // 2, 1, CRNN_CLASSES)})


# -- small CNN over any height and width ------------------------------------------------------------
def cnn_hw(seed: int = 2) -> DynamicModel:
    b = Builder(seed)
    x = b.op("Relu", [b.conv("image", 3, 8, stride=2)])
    x = b.op("Relu", [b.conv(x, 8, 16, stride=2)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.op("Relu", [b.conv(x, 16, 24)])
    x = b.op("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.nodes.append(helper.make_node("Gemm", [x, b.weight("fc.w", (10, 24)), b.const("fc.b", np.zeros(10, np.float32))],
                                    ["scores"], transB=1, name="Gemm_out"))
    m = b.model([_vi("image", TensorProto.FLOAT, [1, 3, "H", "W"])], [_vi("scores", TensorProto.FLOAT, [1, 10])], "cnn_hw")
    pairs = ((32, 32), (33, 47), (64, 96), (127, 61), (160, 160))
    return DynamicModel(
        "cnn_hw", m, {"H": (32, 160), "W": (32, 160)}, tuple({"H": h, "W": w} for h, w in pairs),
        lambda v, rng: {"image": rng.standard_normal((1, 3, v["H"], v["W"])).astype(np.float32)},
        lambda v: {"scores": (1, 10)})


# -- MobileNetV2-style CNN over a batch range -------------------------------------------------------
MOBILENET_BLOCKS = ((1, 16, 8, 1), (4, 8, 12, 2), (4, 12, 12, 1), (4, 12, 16, 2), (4, 16, 16, 1))
"""(expansion, in channels, out channels, stride) of each inverted residual block."""


def _relu6(b: Builder, x: str) -> str:
    return b.op("Clip", [x, "zero", "six"])


def _inverted_residual(b: Builder, x: str, t: int, cin: int, cout: int, stride: int) -> str:
    hidden = cin * t
    y = _relu6(b, b.conv(x, cin, hidden, k=1)) if t != 1 else x
    y = _relu6(b, b.conv(y, hidden, hidden, stride=stride, group=hidden))
    y = b.conv(y, hidden, cout, k=1)
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


def mobilenet_batch(seed: int = 3) -> DynamicModel:
    b = Builder(seed)
    b.const("zero", np.array(0, np.float32))
    b.const("six", np.array(6, np.float32))
    x = _relu6(b, b.conv("images", 3, 16, stride=2))
    for t, cin, cout, stride in MOBILENET_BLOCKS:
        x = _inverted_residual(b, x, t, cin, cout, stride)
    x = _relu6(b, b.conv(x, 16, 64, k=1))
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    b.nodes.append(helper.make_node("Gemm", [x, b.weight("classifier.w", (10, 64)), b.const("classifier.b", np.zeros(10, np.float32))],
                                    ["logits"], transB=1, name="Gemm_out"))
    m = b.model([_vi("images", TensorProto.FLOAT, ["N", 3, 32, 32])], [_vi("logits", TensorProto.FLOAT, ["N", 10])],
                "mobilenet_batch")
    return DynamicModel(
        "mobilenet_batch", m, {"N": (1, 8)}, tuple({"N": n} for n in _between(1, 8, (2, 3, 5))),
        lambda v, rng: {"images": rng.standard_normal((v["N"], 3, 32, 32)).astype(np.float32)},
        lambda v: {"logits": (v["N"], 10)})


# -- BERT-style encoder over a sequence range -------------------------------------------------------
BERT = {"vocab": 96, "hidden": 32, "heads": 2, "ffn": 64, "layers": 2, "max_positions": 128}


def _linear(b: Builder, x: str, name: str, n_in: int, n_out: int) -> str:
    w = b.weight(f"{name}.weight", (n_in, n_out), fan_in=n_in)
    return b.op("Add", [b.op("MatMul", [x, w]), b.const(f"{name}.bias", (b.rng.standard_normal(n_out) * 0.02).astype(np.float32))])


def _layer_norm(b: Builder, x: str, name: str) -> str:
    h = BERT["hidden"]
    return b.op("LayerNormalization", [x, b.const(f"{name}.gamma", np.ones(h, np.float32)),
                                       b.const(f"{name}.beta", np.zeros(h, np.float32))], axis=-1, epsilon=1e-12)


def _heads(b: Builder, x: str, transpose_k: bool = False) -> str:
    """[B, S, H] -> [B, heads, S, dh] ([B, heads, dh, S] for keys), the reshape target from Shape/Gather/Concat."""
    dh = BERT["hidden"] // BERT["heads"]
    y = _reshape_by_dims(b, x, x, [0, 1], [BERT["heads"], dh])
    return b.op("Transpose", [y], perm=[0, 2, 3, 1] if transpose_k else [0, 2, 1, 3])


def _attention(b: Builder, x: str, mask: str, name: str) -> str:
    h = BERT["hidden"]
    q, k, v = (_heads(b, _linear(b, x, f"{name}.{p}", h, h), transpose_k=p == "key") for p in ("query", "key", "value"))
    scores = b.op("Div", [b.op("MatMul", [q, k]), b.const(f"{name}.scale", np.array(np.sqrt(h // BERT["heads"]), np.float32))])
    probs = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = _reshape_by_dims(b, ctx, x, [0, 1], [h])
    return _layer_norm(b, b.op("Add", [_linear(b, ctx, f"{name}.output", h, h), x]), f"{name}.ln")


def _gelu(b: Builder, x: str) -> str:
    """torch's exact gelu as exported: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = b.op("Erf", [b.op("Div", [x, "sqrt2"])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [erf, "one"])]), "half"])


def _embeddings(b: Builder) -> str:
    h = BERT["hidden"]
    words = b.op("Gather", [b.weight("word_embeddings", (BERT["vocab"], h), fan_in=h), "input_ids"], axis=0)
    length = b.op("Gather", [b.op("Shape", ["input_ids"]), b.const("seq_axis", np.array(1, np.int64))], axis=0)
    positions = b.op("Unsqueeze", [b.op("Range", ["zero_i64", length, "one_i64"]), "axes0"])
    pos = b.op("Gather", [b.weight("position_embeddings", (BERT["max_positions"], h), fan_in=h), positions], axis=0)
    token_type = b.const("token_type_row", (b.rng.standard_normal(h) * 0.1).astype(np.float32))
    return _layer_norm(b, b.op("Add", [b.op("Add", [words, pos]), token_type]), "embeddings.ln")


def bert_encoder(seed: int = 4) -> DynamicModel:
    b = Builder(seed)
    for name, value in (("sqrt2", np.float32(np.sqrt(2))), ("one", np.float32(1)), ("half", np.float32(0.5)),
                        ("zero_i64", np.int64(0)), ("one_i64", np.int64(1)), ("axes0", np.array([0], np.int64)),
                        ("axes12", np.array([1, 2], np.int64)), ("mask_min", np.float32(-10000.0))):
        b.const(name, np.array(value))
    mask = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", "axes12"])], to=TensorProto.FLOAT)
    mask = b.op("Mul", [b.op("Sub", ["one", mask]), "mask_min"])          # [1, 1, 1, seq]
    x = _embeddings(b)
    h, ffn = BERT["hidden"], BERT["ffn"]
    for layer in range(BERT["layers"]):
        x = _attention(b, x, mask, f"layer{layer}.attention")
        inner = _gelu(b, _linear(b, x, f"layer{layer}.intermediate", h, ffn))
        x = _layer_norm(b, b.op("Add", [_linear(b, inner, f"layer{layer}.output", ffn, h), x]), f"layer{layer}.ln")
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="Identity_out"))
    first = b.op("Gather", ["last_hidden_state", "zero_i64"], axis=1)
    b.nodes.append(helper.make_node("Tanh", [_linear(b, first, "pooler", h, h)], ["pooler_output"], name="Tanh_out"))
    m = b.model([_vi("input_ids", TensorProto.INT64, [1, "seq"]), _vi("attention_mask", TensorProto.INT64, [1, "seq"])],
                [_vi("last_hidden_state", TensorProto.FLOAT, [1, "seq", h]), _vi("pooler_output", TensorProto.FLOAT, [1, h])],
                "bert_encoder")

    def feeds(v: Values, rng: np.random.Generator) -> dict[str, np.ndarray]:
        s = v["seq"]
        mask = np.ones((1, s), np.int64)
        mask[0, s - s // 5:] = 0  # the last fifth is padding
        return {"input_ids": rng.integers(1, BERT["vocab"], (1, s), dtype=np.int64), "attention_mask": mask}
    return DynamicModel("bert_encoder", m, {"seq": (8, 128)}, tuple({"seq": s} for s in _between(8, 128, (17, 64, 99))),
                        feeds, lambda v: {"last_hidden_state": (1, v["seq"], h), "pooler_output": (1, h)})


# -- greedy decoder Loop with an end token ----------------------------------------------------------
DECODER = {"hidden": 16, "vocab": 8, "end": 0, "start": 1, "max_steps": 20, "stop_gain": 8.0}


@dataclass(frozen=True)
class DecoderModel:
    """A greedy decoder: `memory` [1, 16] in; `tokens` [steps, 1] and `scores` [steps, 1, 8] out, steps <= 20.

    Step t (from 1) adds stop_gain * (t - s) to the end token's logit, s = memory . u, so the loop ends at the step
    where that term overtakes the other logits (tanh-bounded): `feeds_stopping_at(k)` puts s at k - 0.5."""

    model: onnx.ModelProto
    direction: np.ndarray = field(repr=False)
    """u / |u|^2: memory = s * direction gives memory . u = s"""

    def feeds_stopping_at(self, step: int) -> dict[str, np.ndarray]:
        return {"memory": ((step - 0.5) * self.direction).astype(np.float32)[None, :]}


def _decoder_body(b: Builder) -> onnx.GraphProto:
    d = DECODER
    body = Builder(0)
    e = body.op("Gather", ["embeddings", "token_in"], axis=0)              # [1, H]
    h = body.op("Tanh", [body.op("Add", [body.op("Add", [body.op("MatMul", ["h_in", "w_hidden"]), e]), "memory_proj"])])
    step = body.op("Add", [body.op("Cast", ["iteration"], to=TensorProto.FLOAT), "one"])
    stop_bias = body.op("Mul", [body.op("Sub", [step, "stop_at"]), "end_gain"])  # [1, vocab]
    logits = body.op("Add", [body.op("MatMul", [h, "w_out"]), stop_bias])
    token = body.op("ArgMax", [logits], axis=1, keepdims=0)                # [1] int64
    more = body.op("Squeeze", [body.op("Not", [body.op("Equal", [token, "end_token"])]), "axes0"])
    body.nodes += [helper.make_node("Identity", [h], ["h_out"]), helper.make_node("Identity", [token], ["token_out"]),
                   helper.make_node("Identity", [token], ["step_token"]), helper.make_node("Identity", [logits], ["step_scores"]),
                   helper.make_node("Identity", [more], ["cond_out"])]
    hidden = d["hidden"]
    return helper.make_graph(
        body.nodes, "decode_step",
        [_vi("iteration", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("h_in", TensorProto.FLOAT, [1, hidden]), _vi("token_in", TensorProto.INT64, [1])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("h_out", TensorProto.FLOAT, [1, hidden]),
         _vi("token_out", TensorProto.INT64, [1]), _vi("step_token", TensorProto.INT64, [1]),
         _vi("step_scores", TensorProto.FLOAT, [1, d["vocab"]])])


def greedy_decoder(seed: int = 5) -> DecoderModel:
    d = DECODER
    b = Builder(seed)
    hidden, vocab = d["hidden"], d["vocab"]
    b.weight("embeddings", (vocab, hidden), fan_in=hidden)
    b.weight("w_hidden", (hidden, hidden), fan_in=hidden)
    b.weight("w_out", (hidden, vocab), fan_in=2 * hidden)
    u = b.rng.standard_normal(hidden).astype(np.float32)
    b.const("u", u[:, None])
    b.weight("w_memory", (hidden, hidden), fan_in=4 * hidden)
    gain = np.zeros((1, vocab), np.float32)
    gain[0, d["end"]] = d["stop_gain"]
    for name, value in (("end_gain", gain), ("one", np.float32(1)), ("axes0", np.array([0], np.int64)),
                        ("end_token", np.array([d["end"]], np.int64)), ("max_steps", np.int64(d["max_steps"])),
                        ("keep_going", np.array(True)), ("h0", np.zeros((1, hidden), np.float32)),
                        ("start_token", np.array([d["start"]], np.int64))):
        b.const(name, np.array(value))
    b.nodes.append(helper.make_node("MatMul", ["memory", "u"], ["stop_at"], name="stop_at"))
    b.nodes.append(helper.make_node("MatMul", ["memory", "w_memory"], ["memory_proj"], name="memory_proj"))
    b.nodes.append(helper.make_node("Loop", ["max_steps", "keep_going", "h0", "start_token"],
                                    ["h_final", "last_token", "tokens", "scores"], name="decode", body=_decoder_body(b)))
    m = b.model([_vi("memory", TensorProto.FLOAT, [1, hidden])],
                [_vi("tokens", TensorProto.INT64, ["steps", 1]), _vi("scores", TensorProto.FLOAT, ["steps", 1, vocab]),
                 _vi("h_final", TensorProto.FLOAT, [1, hidden])], "greedy_decoder")
    return DecoderModel(m, u / float(u @ u))


BUILDERS: dict[str, Callable[[], DynamicModel]] = {
    "crnn": crnn, "cnn_hw": cnn_hw, "mobilenet_batch": mobilenet_batch, "bert_encoder": bert_encoder}
"""The models with dims over a range (the decoder, whose output length depends on the data, is `greedy_decoder`)."""
