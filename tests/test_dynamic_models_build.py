"""Issue #26's must-show: each dynamic test model built ONCE over its ranges (x86_64 here, aarch64 and armv7 under
qemu) and run at its minimum, maximum and three sizes between against ONNX Runtime; a feed outside a range refused."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import dynamic_models as dm
from fluidml_xc.build import BuildOptions, build_model
from fluidml_xc.errors import InputError
from fluidml_xc.frontend.ranges import DimSpec, ShapeRanges
from fluidml_xc.run.execute import run_artifact

MODELS = ("crnn", "bert_encoder", "cnn_hw", "mobilenet_batch")
BOARDS = ("x86_64", "qemu-aarch64", "qemu-armv7")


def _build(model: dm.DynamicModel, board: str, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model.model, str(path))
    ranges = ShapeRanges(dims={k: DimSpec(lo, hi) for k, (lo, hi) in model.ranges.items()})
    return build_model(path, BuildOptions(board=board, out_dir=tmp_path / "art", profile_runner=False, record_last=False,
                                          ranges=ranges)).artifact


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", MODELS)
def test_one_build_serves_the_range(name, board, tmp_path):
    model = getattr(dm, name)()
    artifact = _build(model, board, tmp_path)
    session = ort.InferenceSession(model.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for values in model.sizes:
        feeds = model.feeds(values)
        want = session.run(None, feeds)
        got = run_artifact(artifact, feeds, timeout=600).outputs
        got = list(got.values()) if isinstance(got, dict) else list(got)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.shape(g) == w.shape, f"{name} at {values}: shape {np.shape(g)}, ORT {w.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} on {board} at {values}")


def test_a_feed_outside_the_range_is_refused(tmp_path):
    model = dm.crnn()
    artifact = _build(model, "x86_64", tmp_path)
    choice = json.loads((artifact / "manifest.json").read_text())["optimizer"]["range_choice"]
    assert set(choice["predicted_ns"]) >= {"min", "opt"} and choice["worst_ratio"] >= 1.0
    (symbol, (lo, hi)), = model.ranges.items()
    with pytest.raises(InputError) as err:
        run_artifact(artifact, model.feeds({symbol: hi + 1}), timeout=600)
    assert str(hi) in str(err.value) and "\n" not in str(err.value).strip()
