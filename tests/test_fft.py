"""DFT and STFT as a batched FFT (kernels/fft.py, issue #28): the frame lengths speech uses (400 = 4*4*5*5,
512 = 4^4*2), a generic prime factor (7, 11, 401), real and complex input, onesided, inverse, irfft, an axis
before others, dft_length padding and truncation, float64, STFT frames with a window; a Scan whose body is one DFT
imports as one batched DFT. Compared with ONNX Runtime natively and under qemu-aarch64 / qemu-armv7."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fluidml_xc.kernels.fft import fft_lanes, fft_radices
from fluidml_xc.pipeline import import_graph
from modelrun import compile_and_run, graph_model, require_emulator

node = helper.make_node


def i64(v):
    return np.array(v, np.int64)


def ort_run(m, feeds):
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in m.graph.output], session.run(None, feeds)))


def check(m, feeds, got, rtol=1e-3):
    """Against ORT, whose direct float32 DFT of 400 points is off numpy's float64 FFT by up to 1e-4 of the largest
    bin (and its float64 one by 2.6e-10 at 154 points)."""
    for name, want in ort_run(m, feeds).items():
        assert got[name].shape == want.shape and got[name].dtype == want.dtype, name
        scale = max(1.0, float(np.abs(want).max()))
        tol = 1e-9 if want.dtype == np.float64 else rtol
        np.testing.assert_allclose(got[name], want, rtol=0, atol=tol * scale, err_msg=name)


def pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


def numpy_reference(feeds) -> dict:
    r, c, d = feeds["r"][..., 0], feeds["c"][..., 0] + 1j * feeds["c"][..., 1], feeds["d"][..., 0] + 1j * feeds["d"][..., 1]
    h, h200 = (feeds[k][..., 0] + 1j * feeds[k][..., 1] for k in ("h", "h200"))
    frames = np.stack([feeds["sig"][:, f * 160:f * 160 + 400] for f in range((1200 - 400) // 160 + 1)], axis=1)
    fft = np.fft
    return {"rfft": pairs(fft.rfft(r, axis=2)), "full": pairs(fft.fft(r, axis=2)),
            "rfft512": pairs(fft.rfft(feeds["r512"][..., 0], axis=2)), "axis_before": pairs(fft.fft(c, axis=1)),
            "inverse_padded": pairs(fft.ifft(c, n=160, axis=1)), "truncated": pairs(fft.fft(c, n=100, axis=1)),
            "prime": pairs(fft.fft(c, n=401, axis=1)), "irfft": fft.irfft(h, n=400, axis=1)[..., None],
            "irfft_odd": fft.irfft(h200, n=399, axis=1)[..., None], "f64": pairs(fft.fft(d, axis=1)),
            "f64_inverse": pairs(fft.ifft(d, axis=1)), "stft": pairs(fft.rfft(frames * np.hanning(400).astype(np.float32), axis=2)),
            "stft_full": pairs(fft.fft(frames, axis=2))}


def check_numpy(feeds, got):
    """Against numpy's float64 FFT: float32 outputs within 2e-6 of the largest bin, float64 ones within 1e-13."""
    for name, want in numpy_reference(feeds).items():
        assert got[name].shape == want.shape, name
        tol = 1e-13 if got[name].dtype == np.float64 else 2e-6
        np.testing.assert_allclose(got[name], want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max())), err_msg=name)


def test_radices_and_lanes():
    assert fft_radices(400) == [4, 4, 5, 5] and fft_radices(512) == [4, 4, 4, 4, 2]
    assert fft_radices(154) == [2, 7, 11] and fft_radices(401) == [401] and fft_radices(1) == []
    assert fft_lanes(512, 256) == 4 and fft_lanes(512, 512) == 4 and fft_lanes(4096, 256) == 1 and fft_lanes(8192, 256) == 0


def dft_model(signal_len: int = 400, frames: int = 5):
    rng = np.random.default_rng(400)
    nodes = [
        node("DFT", ["r", "", "ax2"], ["rfft"], onesided=1),
        node("DFT", ["r", "", "ax2"], ["full"]),
        node("DFT", ["r512", "", "ax2"], ["rfft512"], onesided=1),
        node("DFT", ["c", "", "ax1"], ["axis_before"]),
        node("DFT", ["c", "n160", "ax1"], ["inverse_padded"], inverse=1),
        node("DFT", ["c", "n100", "ax1"], ["truncated"]),
        node("DFT", ["c", "n401", "ax1"], ["prime"]),
        node("DFT", ["h", "n400", "ax1"], ["irfft"], inverse=1, onesided=1),
        node("DFT", ["h200", "n399", "ax1"], ["irfft_odd"], inverse=1, onesided=1),
        node("DFT", ["d", "", "ax1"], ["f64"]),
        node("DFT", ["d", "", "ax1"], ["f64_inverse"], inverse=1),
        node("STFT", ["sig", "hop", "win"], ["stft"], onesided=1),
        node("STFT", ["sig", "hop", "", "n400"], ["stft_full"], onesided=0),
    ]
    feeds = {"r": rng.standard_normal((2, frames, signal_len, 1)).astype(np.float32),
             "r512": rng.standard_normal((1, frames, 512, 1)).astype(np.float32),
             "c": rng.standard_normal((2, 154, 3, 2)).astype(np.float32),
             "h": rng.standard_normal((3, 201, 2)).astype(np.float32), "h200": rng.standard_normal((3, 200, 2)).astype(np.float32),
             "d": rng.standard_normal((3, 154, 2)),
             "sig": rng.standard_normal((2, 1200)).astype(np.float32)}
    consts = {"ax1": i64(1), "ax2": i64(2), "n160": i64(160), "n100": i64(100), "n401": i64(401), "n400": i64(400),
              "n399": i64(399), "hop": i64(160), "win": np.hanning(400).astype(np.float32)}
    outs = [n.output[0] for n in nodes]
    return graph_model(nodes, feeds, outs, consts, 20, ir_version=10), feeds


def test_dft_and_stft_forms_match_ort(tmp_path):
    m, feeds = dft_model()
    got = compile_and_run(m, feeds, tmp_path, profile_runner=False)
    check(m, feeds, got)
    check_numpy(feeds, got)


@pytest.mark.parametrize("board", ["qemu-aarch64", "qemu-armv7"])
def test_dft_and_stft_under_qemu(tmp_path, board):
    require_emulator(board)
    m, feeds = dft_model(frames=3)
    got = compile_and_run(m, feeds, tmp_path, board, profile_runner=False)
    check(m, feeds, got)
    check_numpy(feeds, got)


def scan_model(opset: int, out_axis: int = 0, reverse: int = 0):
    """frames [batch 2, 6 frames, 400 samples, 1] scanned along axis 1, the body one rfft of its frame."""
    step = helper.make_tensor_value_info("frame", TensorProto.FLOAT, [2, 400, 1])
    spec = helper.make_tensor_value_info("spec", TensorProto.FLOAT, None)
    if opset >= 20:
        body_nodes = [node("Constant", [], ["axis"], value=helper.make_tensor("a", TensorProto.INT64, [], [-2])),
                      node("DFT", ["frame", "", "axis"], ["spec"], onesided=1)]
    else:
        body_nodes = [node("DFT", ["frame"], ["spec"], axis=1, onesided=1)]
    body = helper.make_graph(body_nodes, "body", [step], [spec])
    scan = node("Scan", ["frames"], ["out"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                scan_output_axes=[out_axis], scan_input_directions=[reverse], scan_output_directions=[reverse])
    feeds = {"frames": np.random.default_rng(opset).standard_normal((2, 6, 400, 1)).astype(np.float32)}
    return graph_model([scan], feeds, ["out"], {}, opset, ir_version=10 if opset >= 20 else 8), feeds


@pytest.mark.parametrize("opset, out_axis, reverse", [(20, 0, 0), (20, 1, 1), (17, -1, 0)])
def test_scan_of_one_dft_is_one_batched_dft(tmp_path, opset, out_axis, reverse):
    m, feeds = scan_model(opset, out_axis, reverse)
    graph = import_graph(m)
    assert [n.op_type for n in graph.nodes].count("DFT") == 1
    assert not any(n.op_type in ("Gather", "Concat") for n in graph.nodes)
    check(m, feeds, compile_and_run(m, feeds, tmp_path, profile_runner=False))


def test_scan_body_beyond_one_dft_still_unrolls(tmp_path):
    """A body with more than the DFT (here a Mul by a state) keeps the per-step form, and matches ORT."""
    m, feeds = scan_model(20)
    body = m.graph.node[0].attribute[0].g
    body.node[1].output[0] = "raw"
    body.node.append(node("Mul", ["raw", "raw"], ["spec"]))
    graph = import_graph(m)
    assert [n.op_type for n in graph.nodes].count("DFT") == 6
    check(m, feeds, compile_and_run(m, feeds, tmp_path, profile_runner=False), rtol=1e-3)


def test_frames_split_over_threads_match_one_thread(tmp_path):
    """The FFT's groups of frames are the tiles of the op's parallel region: 2 threads give the same bits as 1."""
    m, feeds = dft_model(frames=13)
    one = compile_and_run(m, feeds, tmp_path / "t1", threads=1, profile_runner=False)
    two = compile_and_run(m, feeds, tmp_path / "t2", threads=2, profile_runner=False)
    for name in one:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)
