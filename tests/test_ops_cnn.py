"""CNN ops (Conv, ConvTranspose, pools, normalizations) built and run against onnx.reference.

Several nodes share one model so each test pays for one build; a small conv net also runs on
aarch64 and armv7 under qemu-user.
"""
from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from modelrun import compile_and_run, lrn_numpy, rand, reference, require_emulator

RTOL, ATOL = 1e-4, 1e-5


class Net:
    """A graph of independent nodes over shared inputs; every node output is a graph output."""

    def __init__(self, **inputs: np.ndarray):
        self.feeds, self.nodes, self.inits, self.outputs = dict(inputs), [], [], []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], n_outputs: int = 1, **attrs) -> list[str]:
        outs = [f"{op.lower()}{len(self.nodes)}_{i}" for i in range(n_outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=outs[0], **attrs))
        self.outputs += outs
        return outs

    def model(self, opset: int = 19):
        graph = helper.make_graph(
            self.nodes, "cnn",
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in self.feeds.items()],
            [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in self.outputs], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    def check(self, tmp_path, board: str = "x86_64", opset: int = 19, expected: dict | None = None):
        model = self.model(opset)
        got = compile_and_run(model, self.feeds, tmp_path, board=board)
        want = expected if expected is not None else reference(model, self.feeds)
        for name in want:
            assert got[name].shape == want[name].shape, name
            np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)
        return got


def test_conv_2d_variants(tmp_path):
    net = Net(x=rand(2, 8, 19, 21))
    cases = [
        ((6, 8, 3, 3), dict(pads=[1, 1, 1, 1])),                                   # remainder channel block
        ((16, 8, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
        ((8, 8, 5, 5), dict(pads=[2, 1, 0, 3])),                                   # asymmetric pads
        ((6, 4, 3, 3), dict(group=2, dilations=[2, 3], pads=[2, 3, 2, 3])),
        ((8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),                          # depthwise
        ((8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2])),
        ((16, 1, 5, 5), dict(group=8, pads=[2, 2, 2, 2])),                         # depthwise, multiplier 2
        ((12, 8, 1, 1), {}),                                                       # 1x1 as matmul
        ((12, 8, 1, 1), dict(strides=[2, 2])),
        ((5, 8, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
        ((5, 8, 4, 4), dict(auto_pad="SAME_LOWER")),
        ((5, 8, 3, 2), dict(auto_pad="VALID", strides=[3, 1])),
        ((4, 8, 7, 7), dict(pads=[3, 3, 3, 3], strides=[4, 4])),
        ((3, 8, 11, 11), dict(pads=[6, 6, 6, 6])),                                 # windows wider than the image
    ]
    for i, (wshape, attrs) in enumerate(cases):
        inputs = ["x", net.const(f"w{i}", rand(*wshape, seed=i))]
        if i % 3 != 1:
            inputs.append(net.const(f"b{i}", rand(wshape[0], seed=i)))
        net.node("Conv", inputs, **attrs)
    net.check(tmp_path)


def test_conv_runtime_weights_1d_3d(tmp_path):
    net = Net(x=rand(1, 6, 9, 10), w=rand(8, 3, 3, 3), b=rand(8), x1=rand(2, 4, 40), x3=rand(1, 3, 5, 6, 7), w3=rand(4, 3, 3, 2, 3))
    net.node("Conv", ["x", "w", "b"], group=2, pads=[1, 0, 1, 2], strides=[1, 2])     # weights not constant
    net.node("Conv", ["x1", net.const("w1", rand(6, 4, 5))], pads=[2, 1], strides=[2])
    net.node("Conv", ["x1", net.const("w1d", rand(4, 1, 3)), net.const("b1d", rand(4))], group=4, dilations=[3], pads=[3, 3])
    net.node("Conv", ["x1", net.const("w1p", rand(7, 4, 1))])
    net.node("Conv", ["x3", "w3"], pads=[1, 1, 0, 1, 0, 1], strides=[2, 1, 2])
    net.check(tmp_path)


def test_conv_transpose(tmp_path):
    ort = pytest.importorskip("onnxruntime")   # onnx.reference mishandles grouped ConvTranspose
    net = Net(x=rand(1, 4, 5, 6))
    net.node("ConvTranspose", ["x", net.const("w0", rand(4, 3, 3, 3)), net.const("b0", rand(3))], strides=[2, 2], pads=[1, 1, 1, 1])
    net.node("ConvTranspose", ["x", net.const("w1", rand(4, 2, 2, 3))], group=2, strides=[2, 1], output_padding=[1, 0], dilations=[1, 2])
    net.node("ConvTranspose", ["x", net.const("w2", rand(4, 3, 3, 3))], strides=[2, 2], auto_pad="SAME_UPPER")
    model = net.model(17)
    model.ir_version = 8
    for out in model.graph.output:
        out.type.tensor_type.elem_type = TensorProto.FLOAT
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    net.check(tmp_path, opset=17, expected=dict(zip(net.outputs, session.run(None, net.feeds))))


def test_pools(tmp_path):
    x = rand(2, 3, 11, 12)
    net = Net(x=x, x1=rand(1, 4, 17))
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    net.node("MaxPool", ["x"], 2, kernel_shape=[2, 3], dilations=[2, 1], pads=[1, 0, 0, 2])
    net.node("MaxPool", ["x1"], kernel_shape=[4], strides=[3], auto_pad="SAME_UPPER")
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    net.node("AveragePool", ["x"], kernel_shape=[2, 3], auto_pad="SAME_UPPER", strides=[2, 2])
    net.node("AveragePool", ["x1"], kernel_shape=[3], strides=[2], pads=[1, 2], count_include_pad=1)
    net.node("LpPool", ["x"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
    net.node("GlobalAveragePool", ["x"])
    net.node("GlobalMaxPool", ["x"])
    net.node("GlobalLpPool", ["x"], p=3)
    lp = net.outputs[-1]
    without_lp = net.model(18)   # onnx.reference has no GlobalLpPool
    without_lp.graph.node.pop()
    without_lp.graph.output.pop()
    want = reference(without_lp, net.feeds)
    want[lp] = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    net.check(tmp_path, opset=18, expected=want)


def test_pools_wide_rows(tmp_path):
    """Rows wide enough for the vector column paths (interior vectors, border scalars, overlapped tail)."""
    net = Net(x=rand(2, 3, 9, 45), x1=rand(1, 4, 70))
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    net.node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])
    net.node("MaxPool", ["x"], kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 2, 0, 2])
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[3, 3], pads=[0, 1, 0, 1])
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    net.node("AveragePool", ["x"], kernel_shape=[5, 5], strides=[5, 5])
    net.node("MaxPool", ["x1"], kernel_shape=[3], strides=[1], pads=[1, 1])
    net.node("AveragePool", ["x1"], kernel_shape=[4], strides=[2], pads=[1, 2], count_include_pad=1)
    import onnxruntime as ort
    model = net.model(18)
    for out in model.graph.output:
        out.type.tensor_type.elem_type = TensorProto.FLOAT
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    net.check(tmp_path, opset=18, expected=dict(zip(net.outputs, session.run(None, net.feeds))))


def narrow_pools() -> Net:
    """Pools over NCHW rows narrower than a 16- or 8-lane vector (Inception's 3x3 pools at 14x14 and 7x7)."""
    net = Net(x=rand(1, 5, 14, 14), x2=rand(2, 3, 9, 7), x3=rand(1, 4, 11, 10))
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    net.node("MaxPool", ["x2"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    net.node("AveragePool", ["x2"], kernel_shape=[2, 2], strides=[1, 1])
    net.node("MaxPool", ["x3"], kernel_shape=[3, 3], strides=[1, 1], pads=[0, 1, 0, 1])
    net.node("AveragePool", ["x3"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    return net


def _ort_outputs(net: Net, opset: int = 18) -> dict:
    import onnxruntime as ort
    model = net.model(opset)
    for out in model.graph.output:
        out.type.tensor_type.elem_type = TensorProto.FLOAT
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(net.outputs, session.run(None, net.feeds)))


def test_narrow_pool_rows_take_narrower_vectors():
    """A 14-wide row has 12 padding-free columns of a 3x3 pool: at 16 lanes (AVX-512) they ran one by one (5.9x ORT's
    time in benchmarks/ops.py); now in 8-lane vectors. At 8 lanes (AVX2) a 7-wide row's 5 columns take 4 lanes."""
    from fluidml_xc.pipeline import LowerOptions, import_graph, lower
    from fluidml_xc.target.boards import get_board
    from fluidml_xc.target.machine import machine_spec

    net = Net(x=rand(1, 5, 14, 14))
    net.node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    ir16 = lower(import_graph(net.model(18)), machine_spec(get_board("x86_64-v4")), LowerOptions()).ir_text
    assert "<8 x float>" in ir16
    net = Net(x=rand(1, 5, 7, 7))
    net.node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    ir8 = lower(import_graph(net.model(18)), machine_spec(get_board("x86_64-v3")), LowerOptions()).ir_text
    assert "<4 x float>" in ir8


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64", "qemu-armv7"])
def test_narrow_pool_rows_against_ort(tmp_path, board):
    """The narrower column vectors against ONNX Runtime on every target; on x86_64 also bit-identical at 2 threads."""
    require_emulator(board)
    net = narrow_pools()
    want = _ort_outputs(net)
    got = net.check(tmp_path / "t1", board=board, opset=18, expected=want)
    if board == "x86_64":
        two = compile_and_run(net.model(18), net.feeds, tmp_path / "t2", board=board, threads=2)
        for name in want:
            assert got[name].tobytes() == two[name].tobytes(), name


def test_normalizations(tmp_path):
    x = rand(2, 6, 5, 7)
    scale, bias, mean, var = rand(6, seed=1), rand(6, seed=2), rand(6, seed=3), np.abs(rand(6, seed=4)) + 0.5
    net = Net(x=x, scale=scale, bias=bias, mean=mean, var=var)
    params = [net.const(n + "_c", v) for n, v in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))]
    net.node("BatchNormalization", ["x", *params])
    net.node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], epsilon=1e-3)
    net.node("InstanceNormalization", ["x", params[0], params[1]], epsilon=1e-4)
    net.node("LRN", ["x"], size=3, alpha=1e-2, beta=0.75, bias=2.0)
    net.node("LRN", ["x"], size=4)
    net.node("LpNormalization", ["x"], axis=1, p=2)
    net.node("LpNormalization", ["x"], axis=-1, p=1)
    net.node("LRN", ["x"], size=5, alpha=1e-2, beta=0.6, bias=1.5)
    model = net.model(17)
    want = {k: v for k, v in reference(model, net.feeds).items() if not k.startswith(("lrn", "lpnormalization6"))}
    lrn_a, lrn_b, lp1, lrn_c = net.outputs[3], net.outputs[4], net.outputs[6], net.outputs[7]
    want[lrn_a] = lrn_numpy(x, 3, 1e-2, 0.75, 2.0)
    want[lrn_b] = lrn_numpy(x, 4)
    want[lrn_c] = lrn_numpy(x, 5, 1e-2, 0.6, 1.5)
    want[lp1] = x / np.abs(x).sum(axis=-1, keepdims=True)
    net.check(tmp_path, opset=17, expected=want)


def conv_net() -> Net:
    """Conv+BN+Relu, MaxPool, depthwise, 1x1, BN alone, GlobalAveragePool: a tiny CNN (weights ~ 1/sqrt(fan-in))."""
    net = Net(x=rand(1, 3, 24, 20))

    def weight(name, *shape):
        return net.const(name, rand(*shape) / np.float32(np.sqrt(np.prod(shape[1:]))))
    bn = [net.const(f"bn{i}", v) for i, v in enumerate((rand(16, seed=5), rand(16, seed=6), rand(16, seed=7), np.abs(rand(16, seed=8)) + 0.5))]
    nodes = [
        helper.make_node("Conv", ["x", weight("w0", 16, 3, 3, 3)], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c0", *bn], ["n0"]),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p0", weight("w1", 16, 1, 3, 3), net.const("b1", rand(16))], ["c1"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", *bn], ["n1"], epsilon=1e-3),
        helper.make_node("Conv", ["n1", weight("w2", 24, 16, 1, 1)], ["c2"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["y"]),
    ]
    net.nodes, net.outputs = nodes, ["y", "c2"]
    return net


@pytest.mark.parametrize("board", ["x86_64", "qemu-aarch64", "qemu-armv7"])
def test_conv_net_on_targets(tmp_path, board):
    require_emulator(board)
    conv_net().check(tmp_path, board=board, opset=17)


def test_batchnorm_training_mode_uses_batch_statistics(tmp_path):
    """training_mode=1: batch mean/variance, running statistics blended with momentum; the Conv before it
    and the Relu after it are not folded into it as with constant statistics."""
    x = rand(2, 3, 6, 6)
    w, scale, bias = rand(4, 3, 3, 3, seed=1), rand(4, seed=2), rand(4, seed=3)
    mean, var = rand(4, seed=4), np.abs(rand(4, seed=5)) + 0.5
    inits = [numpy_helper.from_array(v, n) for n, v in (("w", w), ("scale", scale), ("bias", bias), ("mean", mean), ("var", var))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y", "", ""], training_mode=1, epsilon=1e-3),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("BatchNormalization", ["x", "scale3", "bias3", "mean3", "var3"], ["z", "rm", "rv"],
                              training_mode=1, momentum=0.7)]
    inits += [numpy_helper.from_array(v[:3].copy(), n + "3") for n, v in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))]
    graph = helper.make_graph(nodes, "bn_train", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("r", "z", "rm", "rv")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    got = compile_and_run(model, {"x": x}, tmp_path)
    for name, want in reference(model, {"x": x}).items():
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=name)


def test_lp_normalization_zero_slice_gives_zero(tmp_path):
    x = rand(3, 4)
    x[1] = 0
    net = Net(x=x)
    net.node("LpNormalization", ["x"], axis=1, p=2)
    got = net.check(tmp_path, opset=17)
    assert not np.isnan(got[net.outputs[0]]).any()


@pytest.mark.parametrize("opt", ["plain", "greedy", "fluid"])
def test_wide_padded_kernels_stay_inside_each_pixels_taps(tmp_path, opt):
    """Kernels wider than the unrolled limit (KW > 16) with padding: the edge pixels of a block have
    different tap ranges, and none may read outside the row."""
    x = rand(1, 8, 4, 40)
    net = Net(x=x)
    net.node("Conv", ["x", net.const("w17", rand(16, 8, 1, 17, seed=1))], pads=[0, 8, 0, 8])
    net.node("Conv", ["x", net.const("wdw", rand(8, 1, 1, 17, seed=2))], pads=[0, 8, 0, 8], group=8)
    net.node("Conv", ["x", net.const("w33", rand(4, 8, 1, 33, seed=3))], pads=[0, 16, 0, 16])
    model = net.model()
    got = compile_and_run(model, net.feeds, tmp_path, opt=opt)
    for name, want in reference(model, net.feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=1e-4, err_msg=name)
