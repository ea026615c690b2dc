"""ai.onnx.preview.training optimizers against onnx.reference, first step (T=0) and later steps."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from modelrun import compile_and_run, require_emulator, reference

DOMAIN = "ai.onnx.preview.training"
OPTIMIZERS = {
    "Adagrad": (("h",), dict(decay_factor=0.1, epsilon=1e-5, norm_coefficient=0.01)),
    "Momentum": (("v",), dict(alpha=0.9, beta=0.1, mode="standard", norm_coefficient=0.02)),
    "Nesterov": (("v",), dict(alpha=0.8, beta=0.3, mode="nesterov", norm_coefficient=0.0)),
    "Adam": (("v", "h"), dict(alpha=0.85, beta=0.95, epsilon=1e-6, norm_coefficient=0.01, norm_coefficient_post=0.02)),
}


def optimizer_model(op: str, state: tuple[str, ...], attrs: dict, tensors: int, shape=(3, 5)):
    names = [f"{p}{i}" for p in ("x", "g", *state) for i in range(tensors)]
    outs = [f"{p}{i}_new" for p in ("x", *state) for i in range(tensors)]
    node = helper.make_node("Momentum" if op == "Nesterov" else op, ["r", "t", *names], outs, domain=DOMAIN, **attrs)
    inputs = [helper.make_tensor_value_info("r", TensorProto.FLOAT, ()), helper.make_tensor_value_info("t", TensorProto.INT64, ())]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names]
    graph = helper.make_graph([node], "opt", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    r = np.random.default_rng(len(names))
    feeds = {n: r.standard_normal(shape).astype(np.float32) for n in names}
    for n in names:
        if n[0] == "h":
            feeds[n] = np.abs(feeds[n])
    return model, feeds


@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize("op", list(OPTIMIZERS))
def test_optimizer_matches_reference(tmp_path, op, step):
    state, attrs = OPTIMIZERS[op]
    model, feeds = optimizer_model(op, state, attrs, tensors=2)
    feeds.update(r=np.array(0.1, np.float32), t=np.array(step, np.int64))
    got = compile_and_run(model, feeds, tmp_path)
    for name, want in reference(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_adam_under_qemu_armv7(tmp_path):
    require_emulator("rpi3")
    state, attrs = OPTIMIZERS["Adam"]
    model, feeds = optimizer_model("Adam", state, attrs, tensors=1, shape=(37,))
    feeds.update(r=np.array(0.05, np.float32), t=np.array(2, np.int64))
    got = compile_and_run(model, feeds, tmp_path, board="rpi3")
    for name, want in reference(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("op", ["Adagrad", "Adam"])
def test_default_epsilon_keeps_zero_state_finite(tmp_path, op):
    """Without an epsilon attribute the schema's 1e-6 applies: zero gradients and state stay finite."""
    state, attrs = OPTIMIZERS[op]
    attrs = {k: v for k, v in attrs.items() if k != "epsilon"}
    model, feeds = optimizer_model(op, state, attrs, tensors=1, shape=(4,))
    feeds = {n: (np.zeros_like(v) if n[0] != "x" else v) for n, v in feeds.items()}
    feeds.update(r=np.array(0.1, np.float32), t=np.array(1, np.int64))
    got = compile_and_run(model, feeds, tmp_path)
    for name, want in reference(model, feeds).items():
        assert np.isfinite(got[name]).all(), name
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
