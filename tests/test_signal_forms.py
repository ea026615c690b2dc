"""The signal ops (STFT, DFT, MelWeightMatrix, the windows) in the forms exporters write and ONNX Runtime runs
(issue #26): each accepted form is built through the normal path and compared with ORT (x86_64 natively, the
onnxscript-style log-mel front end also under qemu-aarch64); each form ORT refuses is refused at build time in
one line; a length computed at run time asks for --bind and, bound, matches ORT; MelWeightMatrix over a run-time
sample rate and edges matches ORT exactly."""
from __future__ import annotations

import platform

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from fluidml_xc.errors import InputError
from fluidml_xc.pipeline import LowerOptions, import_graph, lower
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import compile_and_run, graph_model, require_emulator

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="native builds for x86_64")

node = helper.make_node
rng = np.random.default_rng(26)


def i64(v):
    return np.array(v, np.int64)


def i32(v):
    return np.array(v, np.int32)


def f32(v):
    return np.array(v, np.float32)


def model(nodes, feeds, outputs, consts, opset):
    return graph_model(nodes, feeds, outputs, consts, opset, ir_version=10)


def ort_run(m, feeds) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in m.graph.output], session.run(None, feeds)))


WINDOW_F64 = dict(rtol=1e-6, atol=1e-7)
"""ORT computes a float64 window from float32 coefficients (Hamming's 25/46) and pi = 3.14159265, so it agrees with
ONNX's definition, which the build folds with onnx.reference, to float32 precision only."""


def tolerance(dtype) -> dict:
    return {np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3), np.dtype(np.float64): dict(rtol=1e-10, atol=1e-10)}.get(
        np.dtype(dtype), dict(rtol=1e-4, atol=1e-5))


def check_against_ort(m, feeds, got):
    for name, want in ort_run(m, feeds).items():
        assert got[name].shape == want.shape and got[name].dtype == want.dtype, (name, got[name].shape, want.shape)
        tol = WINDOW_F64 if name.startswith("hamming") else tolerance(want.dtype)
        np.testing.assert_allclose(got[name], want, err_msg=name, **tol)


def front_end(samples: int = 400, rate_input: bool = False):
    """A log-mel front end as torch.stft + a mel filterbank export through onnxscript's torch_lib (before it added the
    trailing 1): the signal centred by a reflect Pad and read by STFT as [batch, length], the window from a HannWindow
    node made CastLike the signal, both window and frame_length given, the result transposed to [batch, bins, frames];
    the filterbank from MelWeightMatrix (over the graph input `rate` when rate_input)."""
    nodes = [
        node("Pad", ["audio", "centre"], ["padded"], mode="reflect"),
        node("HannWindow", ["n_fft"], ["hann"]),
        node("CastLike", ["hann", "audio"], ["window"]),
        node("STFT", ["padded", "hop", "window", "n_fft"], ["stft"], onesided=1),
        node("Transpose", ["stft"], ["spec"], perm=[0, 2, 1, 3]),
        node("ReduceL2", ["spec", "last"], ["magnitude"], keepdims=0),
        node("Pow", ["magnitude", "two"], ["power"]),
        node("Transpose", ["power"], ["power_t"], perm=[0, 2, 1]),
        node("MelWeightMatrix", ["n_mels", "n_fft", "rate", "f_lo", "f_hi"], ["fbank"]),
        node("MatMul", ["power_t", "fbank"], ["mel"]),
        node("Clip", ["mel", "floor"], ["mel_floor"]),
        node("Log", ["mel_floor"], ["logmel"]),
    ]
    consts = {"centre": i64([0, 32, 0, 32]), "n_fft": i64(64), "hop": i64(24), "last": i64([-1]), "two": f32(2),
              "n_mels": i64(10), "rate": i64(8000), "f_lo": f32(60), "f_hi": f32(3800), "floor": f32(1e-10)}
    feeds = {"audio": rng.standard_normal((1, samples)).astype(np.float32)}
    if rate_input:
        feeds["rate"] = consts.pop("rate")
    return nodes, feeds, ["logmel", "spec"], consts


def forms():
    """One graph of every accepted form outside the front end (a single build)."""
    nodes = [
        node("STFT", ["sig", "step6", "", "flen10"], ["stft_flen_full"], onesided=0),
        node("STFT", ["sig", "step6", "", "flen10"], ["stft_flen_half"], onesided=1),
        node("STFT", ["sig", "step6", "win10", "flen10"], ["stft_win_and_flen"]),
        node("STFT", ["sig", "step6_i32", "", "flen9_i32"], ["stft_int32"]),
        node("STFT", ["sig", "step6_vec", "win10"], ["stft_step_vec"]),
        node("STFT", ["sig3", "step6", "win10"], ["stft_trailing_1"]),
        node("STFT", ["pair", "step1", "", "flen2"], ["stft_length_2"]),
        node("STFT", ["whole", "step6", "win10"], ["stft_one_frame"]),
        node("STFT", ["short", "step20", "win10"], ["stft_step_past_end"]),
        node("STFT", ["csig", "step6", "win10"], ["stft_complex_half"], onesided=1),
        node("STFT", ["sig_f64", "step6", "win_f64"], ["stft_f64"]),
        node("STFT", ["sig_f16", "step6", "win_f16"], ["stft_f16"]),
        node("DFT", ["r", "", "ax0"], ["dft_batch_axis"]),
        node("DFT", ["r", "n6_i32", "axm2"], ["dft_len_int32"]),
        node("DFT", ["c_f16", "", "ax1"], ["dft_f16_inverse"], inverse=1),
        node("DFT", ["r_f64", "n12", "ax1"], ["dft_f64_onesided"], onesided=1),
        node("HammingWindow", ["size10_i32"], ["hamming_symmetric_f64"], periodic=0, output_datatype=TensorProto.DOUBLE),
        node("BlackmanWindow", ["size7"], ["blackman"]),
        node("HammingWindow", ["size40"], ["hamming_f32"]),
        node("Mul", ["sig", "sig"], ["sq"]),
        node("Mul", ["sq", "hamming_f32"], ["sq_weighted"]),
        node("MelWeightMatrix", ["n8_i32", "n16_i32", "rate_i32", "lo_f16", "hi_f16"], ["mel_int32_f16"],
             output_datatype=TensorProto.DOUBLE),
    ]
    sig = rng.standard_normal((2, 40)).astype(np.float32)
    feeds = {"sig": sig, "sig3": sig[..., None].copy(), "pair": rng.standard_normal((3, 2)).astype(np.float32),
             "whole": rng.standard_normal((2, 10)).astype(np.float32), "short": rng.standard_normal((2, 12)).astype(np.float32),
             "csig": rng.standard_normal((1, 40, 2)).astype(np.float32), "sig_f64": sig.astype(np.float64),
             "sig_f16": sig.astype(np.float16), "r": rng.standard_normal((3, 8, 1)).astype(np.float32),
             "c_f16": rng.standard_normal((2, 8, 2)).astype(np.float16), "r_f64": rng.standard_normal((2, 9, 1))}
    win = np.hanning(10).astype(np.float32)
    consts = {"step1": i64(1), "step6": i64(6), "step20": i64(20), "step6_i32": i32(6), "step6_vec": i64([6]),
              "flen2": i64(2), "flen10": i64(10), "flen9_i32": i32(9), "win10": win, "win_f64": win.astype(np.float64),
              "win_f16": win.astype(np.float16), "ax0": i64(0), "ax1": i64(1), "axm2": i64(-2), "n6_i32": i32(6),
              "n12": i64(12), "size10_i32": i32(10), "size7": i64(7), "size40": i64(40), "n8_i32": i32(8),
              "n16_i32": i32(16), "rate_i32": i32(8000), "lo_f16": np.array(0, np.float16), "hi_f16": np.array(4000, np.float16)}
    outputs = [n.output[0] for n in nodes if n.output[0] not in ("sq", "hamming_f32")]
    return nodes, feeds, outputs, consts


def test_signal_forms_match_ort(tmp_path):
    nodes, feeds, outputs, consts = forms()
    fe_nodes, fe_feeds, fe_outputs, fe_consts = front_end()
    m = model(nodes + fe_nodes, {**feeds, **fe_feeds}, outputs + fe_outputs, {**consts, **fe_consts}, 20)
    all_feeds = {**feeds, **fe_feeds}
    check_against_ort(m, all_feeds, compile_and_run(m, all_feeds, tmp_path, profile_runner=False))


def test_front_end_opset18_aarch64(tmp_path):
    require_emulator("qemu-aarch64")
    nodes, feeds, outputs, consts = front_end(samples=333, rate_input=True)
    m = model(nodes, feeds, outputs, consts, 18)
    check_against_ort(m, feeds, compile_and_run(m, feeds, tmp_path, "qemu-aarch64", profile_runner=False))


def _sig(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


MEL = ["nb", "dl", "sr", "lo", "hi"]
REFUSED = {
    # label: (nodes, feeds, consts, what our one-line error says)
    "stft_rank_4": ([node("STFT", ["x", "s", "w"], ["y"])], {"x": _sig(1, 2, 40, 1)}, {"s": i64(6), "w": f32(np.hanning(10))},
                    r"the signal must be \[batch, length\] or \[batch, length, 1 or 2\].*not \[1, 2, 40, 1\]"),
    "stft_3_components": ([node("STFT", ["x", "s", "w"], ["y"])], {"x": _sig(2, 40, 3)}, {"s": i64(6), "w": f32(np.hanning(10))},
                          r"not \[2, 40, 3\]"),
    "stft_step_0": ([node("STFT", ["x", "s", "w"], ["y"])], {"x": _sig(2, 40)}, {"s": i64(0), "w": f32(np.hanning(10))},
                    r"frame_step 0 must be positive"),
    "stft_no_frame_length": ([node("STFT", ["x", "s"], ["y"], onesided=0)], {"x": _sig(2, 40)}, {"s": i64(6)},
                             r"neither a window nor frame_length"),
    "stft_frame_past_signal": ([node("STFT", ["x", "s", "w"], ["y"])], {"x": _sig(2, 8)}, {"s": i64(6), "w": f32(np.hanning(10))},
                               r"frame length 10 must be between 1 and the signal length 8"),
    "stft_window_dtype": ([node("STFT", ["x", "s", "w"], ["y"])], {"x": _sig(2, 40, dtype=np.float64)},
                          {"s": i64(6), "w": f32(np.hanning(10))}, r"window|T1"),
    "stft_step_flen_dtypes": ([node("STFT", ["x", "s", "", "n"], ["y"])], {"x": _sig(2, 40)}, {"s": i32(6), "n": i64(10)},
                              r"frame_step is int32 but frame_length is int64; both are type T2"),
    "hann_size_0": ([node("HannWindow", ["n"], ["y"])], {}, {"n": i64(0)}, r"HannWindow node .*size 0 must be positive"),
    "blackman_size_negative": ([node("BlackmanWindow", ["n"], ["y"])], {}, {"n": i32(-3)}, r"size -3 must be positive"),
    "mel_upper_past_last_bin": ([node("MelWeightMatrix", MEL, ["y"])], {},
                                {"nb": i64(8), "dl": i64(15), "sr": i64(8000), "lo": f32(0), "hi": f32(4000)},
                                r"upper_edge_hertz 4000 falls on spectrogram bin 8, outside the 8 bins"),
    "mel_upper_past_nyquist": ([node("MelWeightMatrix", MEL, ["y"])], {},
                               {"nb": i64(8), "dl": i64(16), "sr": i64(8000), "lo": f32(0), "hi": f32(6000)},
                               r"upper_edge_hertz 6000 .* keep the edges in \[0, 4235.29\) Hz"),
    "mel_negative_lower": ([node("MelWeightMatrix", MEL, ["y"])], {},
                           {"nb": i64(8), "dl": i64(16), "sr": i64(8000), "lo": f32(-100), "hi": f32(4000)},
                           r"lower_edge_hertz -100 falls on spectrogram bin -1"),
    "mel_mixed_ints": ([node("MelWeightMatrix", MEL, ["y"])], {},
                       {"nb": i32(8), "dl": i64(16), "sr": i64(8000), "lo": f32(0), "hi": f32(4000)},
                       r"num_mel_bins is int32 but dft_length is int64; both are type T1"),
    "mel_mixed_floats": ([node("MelWeightMatrix", MEL, ["y"])], {},
                         {"nb": i64(8), "dl": i64(16), "sr": i64(8000), "lo": f32(0), "hi": np.array(4000.0)},
                         r"lower_edge_hertz is float32 but upper_edge_hertz is float64"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_forms_ort_refuses_are_refused_in_one_line(case):
    nodes, feeds, consts, message = REFUSED[case]
    m = model(nodes, feeds, ["y"], consts, 20)
    with pytest.raises(Exception):  # noqa: B017 - ORT raises its own types, at load or at run time
        ort_run(m, feeds)
    with pytest.raises(InputError, match=message) as info:
        import_graph(m)
    assert "\n" not in str(info.value)


RUN_TIME_LENGTHS = {
    # label: (nodes, graph inputs that decide a length, other feeds, consts)
    "stft_frame_step": ([node("STFT", ["x", "s", "w"], ["y"])], {"s": i64(6)}, {"x": _sig(2, 40)}, {"w": f32(np.hanning(10))}),
    "dft_length": ([node("DFT", ["x", "n"], ["y"])], {"n": i64(5)}, {"x": _sig(3, 8, 1)}, {}),
    "dft_axis": ([node("DFT", ["x", "", "a"], ["y"])], {"a": i64(-2)}, {"x": _sig(3, 8, 1)}, {}),
}


@pytest.mark.parametrize("case", list(RUN_TIME_LENGTHS))
def test_run_time_lengths_ask_for_bind_and_bound_match_ort(case):
    from modelrun import jit_run

    nodes, lengths, feeds, consts = RUN_TIME_LENGTHS[case]
    m = model(nodes, {**feeds, **lengths}, ["y"], consts, 20)
    with pytest.raises(InputError, match="--bind") as info:
        lower(import_graph(m), machine_spec(get_board(None)), LowerOptions())
    assert "\n" not in str(info.value)
    bound = model(nodes, feeds, ["y"], {**consts, **lengths}, 20)
    got = jit_run(bound, feeds)["y"]
    want = ort_run(m, {**feeds, **lengths})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


MEL_CONFIGS = [(8, 16, 8000, 0.0, 4000.0), (80, 400, 16000, 20.0, 8000.0), (40, 256, 16000, 125.0, 7600.0),
               (26, 512, 16000, 300.0, 8000.0), (8, 16, 8000, 3000.0, 100.0)]


@pytest.mark.parametrize("config", MEL_CONFIGS, ids=[f"{c[0]}x{c[1]}@{c[2]}_{c[3]:g}-{c[4]:g}" for c in MEL_CONFIGS])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32], ids=["f32", "f64", "i32"])
def test_mel_weight_matrix_with_run_time_rate_and_edges_matches_ort(config, dtype):
    """ORT computes the matrix when sample_rate and the edges are graph inputs (the shape needs only num_mel_bins and
    dft_length): the build computes it at run time too (frontend/mel.py), the same values, reversed edges included."""
    from modelrun import jit_run

    nb, dl, rate, lo, hi = config
    feeds = {"sr": i64(rate), "lo": f32(lo), "hi": f32(hi)}
    m = model([node("MelWeightMatrix", MEL, ["y"], output_datatype=dtype)], feeds, ["y"], {"nb": i64(nb), "dl": i64(dl)}, 20)
    graph = import_graph(m)
    assert set(graph.inputs) == set(feeds) and "MelWeightMatrix" not in {n.op_type for n in graph.nodes}
    want = ort_run(m, feeds)["y"]
    got = jit_run(m, feeds)["y"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
