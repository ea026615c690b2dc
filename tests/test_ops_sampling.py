"""GridSample, DFT, STFT, Col2Im, MaxUnpool, RoiAlign and DeformConv against onnx.reference, built and
run natively on x86_64 (many nodes per model, so only a handful of builds), plus one cross build under
qemu-aarch64."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import helper

from modelrun import check_model, compile_and_run, graph_model, reference, require_emulator

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="native builds for x86_64")

rng = np.random.default_rng(11)


node = helper.make_node


def model(nodes, feeds, outputs, consts=None, opset=22):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=10, infer=True)


def i64(*v):
    return np.array(v, dtype=np.int64)


def s64(v):
    return np.array(v, dtype=np.int64)


def grid_sample_case(small: bool = False):
    nodes, outs = [], []
    modes = ("nearest", "linear", "cubic")
    pads = ("zeros", "border", "reflection")
    for mode in modes:
        for pad in pads:
            for align in ((0,) if small else (0, 1)):
                name = f"y_{mode}_{pad}_{align}"
                nodes.append(node("GridSample", ["x", "grid"], [name], mode=mode, padding_mode=pad, align_corners=align))
                outs.append(name)
    feeds = {"x": rng.standard_normal((2, 3, 5, 6)).astype(np.float32),
             "grid": rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(np.float32)}
    if not small:
        # volumetric (5-D) sampling
        for mode in ("nearest", "linear"):
            for pad in pads:
                name = f"v_{mode}_{pad}"
                nodes.append(node("GridSample", ["x3", "grid3"], [name], mode=mode, padding_mode=pad, align_corners=1))
                outs.append(name)
        feeds["x3"] = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
        feeds["grid3"] = rng.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    return nodes, feeds, outs, None, 22


def grid_sample_opset16_case():
    nodes = [node("GridSample", ["x", "grid"], ["default"]),
             node("GridSample", ["x", "grid"], ["bicubic"], mode="bicubic", padding_mode="border", align_corners=1),
             node("GridSample", ["x", "grid"], ["nearest"], mode="nearest", padding_mode="reflection")]
    feeds = {"x": rng.standard_normal((1, 2, 4, 3)).astype(np.float32), "grid": rng.uniform(-1.5, 1.5, (1, 5, 2, 2)).astype(np.float32)}
    return nodes, feeds, ["default", "bicubic", "nearest"], None, 16


def spectral_case():
    nodes = [
        node("DFT", ["r", "", "ax1"], ["fwd_real"]),
        node("DFT", ["c", "", "ax2"], ["fwd_complex"]),
        node("DFT", ["c", "", "ax1"], ["inv"], inverse=1),
        node("DFT", ["r", "", "ax1"], ["rfft"], onesided=1),
        node("DFT", ["h", "", "ax1"], ["irfft"], inverse=1, onesided=1),
        node("DFT", ["h", "n9", "ax1"], ["irfft_odd"], inverse=1, onesided=1),
        node("DFT", ["r", "n12", "ax1"], ["fwd_padded"]),
        node("DFT", ["c", "n5", "axm2"], ["fwd_truncated"]),
        node("DFT", ["c", "n12", "ax1"], ["inv_fft_padded"], inverse=1),
        node("DFT", ["c", "n7", "ax1"], ["inv_direct"], inverse=1),
        node("STFT", ["sig", "step", "win"], ["stft_window"], onesided=1),
        node("STFT", ["sig", "step", "", "flen"], ["stft_full"], onesided=0),
        node("STFT", ["csig", "step", "win"], ["stft_complex"], onesided=0),
    ]
    feeds = {"r": rng.standard_normal((2, 8, 3, 1)).astype(np.float32),
             "c": rng.standard_normal((2, 8, 3, 2)).astype(np.float32),
             "h": rng.standard_normal((2, 5, 3, 2)).astype(np.float32),
             "sig": rng.standard_normal((2, 40, 1)).astype(np.float32),
             "csig": rng.standard_normal((1, 40, 2)).astype(np.float32)}
    consts = {"ax1": s64(1), "ax2": s64(2), "axm2": s64(-2), "n9": s64(9), "n12": s64(12), "n5": s64(5), "n7": s64(7),
              "step": s64(6), "flen": s64(10), "win": np.hanning(10).astype(np.float32)}
    outs = ["fwd_real", "fwd_complex", "inv", "rfft", "irfft", "irfft_odd", "fwd_padded", "fwd_truncated",
            "inv_fft_padded", "inv_direct", "stft_window", "stft_full", "stft_complex"]
    return nodes, feeds, outs, consts, 20


def dft17_case():
    nodes = [node("DFT", ["c"], ["a"], axis=1), node("DFT", ["c"], ["b"], axis=2, inverse=1),
             node("DFT", ["r", "n6"], ["rf"], axis=1, onesided=1)]
    feeds = {"c": rng.standard_normal((1, 7, 4, 2)).astype(np.float32), "r": rng.standard_normal((3, 7, 1)).astype(np.float32)}
    return nodes, feeds, ["a", "b", "rf"], {"n6": s64(6)}, 17


def image_case():
    rois = np.array([[0.5, 1.0, 6.2, 5.5], [2.0, 0.0, 4.0, 9.5], [-2.0, -1.0, 12.0, 8.0], [3.0, 3.0, 3.2, 3.1]], dtype=np.float32)
    nodes = [
        node("Col2Im", ["cols", "img", "blk"], ["im"]),
        node("Col2Im", ["cols2", "img2", "blk2"], ["im2"], strides=[2, 1], pads=[1, 0, 0, 2], dilations=[1, 2]),
        node("MaxPool", ["p"], ["pooled", "argmax"], kernel_shape=[2, 2], strides=[2, 2]),
        node("MaxUnpool", ["pooled", "argmax"], ["unpooled"], kernel_shape=[2, 2], strides=[2, 2]),
        node("MaxUnpool", ["pooled", "argmax", "oshape"], ["unpooled_big"], kernel_shape=[2, 2], strides=[2, 2]),
        node("RoiAlign", ["fm", "rois", "bidx"], ["roi_avg"], output_height=3, output_width=4, sampling_ratio=2,
             spatial_scale=0.5, coordinate_transformation_mode="output_half_pixel"),
        node("RoiAlign", ["fm", "rois", "bidx"], ["roi_adaptive"], output_height=2, output_width=3, sampling_ratio=0),
        node("RoiAlign", ["fm", "rois", "bidx"], ["roi_max"], output_height=3, output_width=3, sampling_ratio=2, mode="max"),
        node("DeformConv", ["dx", "dw", "doff", "db", "dmask"], ["deform"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
             strides=[2, 2], group=2, offset_group=2),
        node("DeformConv", ["dx", "dw2", "doff2"], ["deform_dil"], kernel_shape=[2, 2], dilations=[2, 1]),
    ]
    # Col2Im: 2 channels, 2x3 blocks over a 5x6 image; then strided/padded/dilated 2x2 blocks over 6x5
    nb = (6 + 1 + 0 - 2) // 2 + 1, (5 + 0 + 2 - 3) // 1 + 1
    feeds = {
        "cols": rng.standard_normal((2, 2 * 6, 4 * 4)).astype(np.float32),
        "cols2": rng.standard_normal((1, 3 * 4, nb[0] * nb[1])).astype(np.float32),
        "p": rng.standard_normal((2, 3, 6, 8)).astype(np.float32),
        "fm": rng.standard_normal((2, 3, 8, 10)).astype(np.float32),
        "dx": rng.standard_normal((1, 4, 7, 6)).astype(np.float32),
    }
    consts = {
        "img": i64(5, 6), "blk": i64(2, 3), "img2": i64(6, 5), "blk2": i64(2, 2), "oshape": i64(2, 3, 7, 9),
        "rois": rois, "bidx": i64(0, 1, 1, 0),
        "dw": rng.standard_normal((6, 2, 3, 3)).astype(np.float32), "db": rng.standard_normal((6,)).astype(np.float32),
        "doff": rng.uniform(-1.5, 1.5, (1, 2 * 9 * 2, 4, 3)).astype(np.float32),
        "dmask": rng.uniform(0, 1, (1, 2 * 9, 4, 3)).astype(np.float32),
        "dw2": rng.standard_normal((2, 4, 2, 2)).astype(np.float32),
        "doff2": rng.uniform(-2, 2, (1, 8, 5, 5)).astype(np.float32),
    }
    outs = ["im", "im2", "unpooled", "unpooled_big", "roi_avg", "roi_adaptive", "roi_max", "deform", "deform_dil"]
    return nodes, feeds, outs, consts, 22


CASES = {"gridsample": grid_sample_case, "spectral": spectral_case, "dft_opset17": dft17_case, "image": image_case}


@pytest.mark.parametrize("case", list(CASES))
def test_sampling_ops(case, tmp_path):
    nodes, feeds, outputs, consts, opset = CASES[case]()
    check_model(tmp_path, model(nodes, feeds, outputs, consts, opset), feeds)


def test_grid_sample_opset16_names(tmp_path):
    """Opset 16's bilinear / bicubic (and its default mode) are opset 20's linear / cubic; onnx.reference
    knows only the new names, so the oracle is the same graph at opset 20."""
    nodes, feeds, outputs, _, _ = grid_sample_opset16_case()
    got = compile_and_run(model(nodes, feeds, outputs, None, 16), feeds, tmp_path, "x86_64", profile_runner=False)
    renamed = [node("GridSample", ["x", "grid"], ["default"], mode="linear"),
               node("GridSample", ["x", "grid"], ["bicubic"], mode="cubic", padding_mode="border", align_corners=1),
               node("GridSample", ["x", "grid"], ["nearest"], mode="nearest", padding_mode="reflection")]
    want = reference(model(renamed, feeds, outputs, None, 20), feeds)
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_sampling_ops_aarch64(tmp_path):
    require_emulator("qemu-aarch64")
    nodes, feeds, outputs, consts, opset = grid_sample_case(small=True)
    snodes, sfeeds, souts, sconsts, _ = spectral_case()
    keep = [0, 2, 4, 10]
    nodes += [snodes[i] for i in keep]
    feeds.update({n: sfeeds[n] for n in ("r", "c", "h", "sig")})
    check_model(tmp_path, model(nodes, feeds, outputs + [souts[i] for i in keep], sconsts, 20), feeds, board="qemu-aarch64")


def test_mixed_radix_fft_rounds_as_numpy():
    """The straight-line inverse FFT, run on numpy float32 scalars, is bit-exact with numpy's ifft."""
    from fluidml_xc.ops.spectral import fft_factors, mixed_radix_fft

    f32 = np.float32

    class Float32:
        add, sub, mul = (lambda s, a, b: f32(a + b)), (lambda s, a, b: f32(a - b)), (lambda s, a, b: f32(a * b))
        neg, const = (lambda s, a: f32(-a)), (lambda s, v: f32(v))

    for n in (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 20, 24, 30, 32, 40, 60, 64, 96, 120, 128):
        assert fft_factors(n) is not None
        x = (rng.standard_normal(n) * 10 + 1j * rng.standard_normal(n)).astype(np.complex64)
        got = mixed_radix_fft(Float32(), [(f32(v.real), f32(v.imag)) for v in x], False, 1.0 / n)
        np.testing.assert_array_equal(np.array([complex(r, i) for r, i in got], dtype=np.complex64), np.fft.ifft(x), err_msg=str(n))
    assert fft_factors(7) is None and fft_factors(14) is None


def test_unsupported_attributes_are_one_line_errors(tmp_path):
    from fluidml_xc.errors import InputError
    from modelrun import build

    feeds = {"x": rng.standard_normal((1, 1, 3, 3)).astype(np.float32), "grid": rng.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)}
    m = model([node("GridSample", ["x", "grid"], ["y"], padding_mode="wrap")], feeds, ["y"], None, 22)
    with pytest.raises(InputError, match=r"GridSample\): padding_mode 'wrap' is not supported") as info:
        build(m, tmp_path, "x86_64")
    assert "\n" not in str(info.value)
