"""kernels/flat.py: elementwise ops over operands of one shape and storage order, and Concat of densely stored
operands, as loops whose lengths are read at run time (issue #27): ONNX Runtime's outputs, the shaped loops' values
(integers and copies the same bits; floats within 2 ulp: LLVM vectorizes other loops, and its vector and scalar
code of a Sigmoid's polynomial contract differently), every thread count alike, and layers of other shapes sharing
one unit."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fluidml_xc.kernels import kernel as kernel_module
from fluidml_xc.ops import fused, movement
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.machine import machine_spec
from modelrun import (assert_same_bits_at_thread_counts, build_uncached as built, proto_model, rand, reference,
                      require_emulator, run, unit_texts)

SHAPES = [(1, 8, 10, 10), (1, 16, 5, 7), (2, 3, 4, 5), (1, 64, 56, 56)]
"""Activation shapes: small ones, two images, and one big enough to be split across threads."""


def activations_model(shapes=SHAPES):
    """Per shape: SiLU (Sigmoid, Mul: fused), HardSwish, an int32 Add of two inputs of that shape, a broadcast Add of a
    per-channel bias (not flat: the shaped loop), and Concats of 2 and 3 of them along the channels and the width."""
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for i, shape in enumerate(shapes):
        x, n = f"x{i}", f"n{i}"
        feeds[x] = rand(*shape, seed=i) * 4
        feeds[n] = (np.arange(np.prod(shape), dtype=np.int32).reshape(shape) % 97) - 40
        inputs += [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape),
                   helper.make_tensor_value_info(n, TensorProto.INT32, shape)]
        inits.append(onnx.numpy_helper.from_array(rand(shape[1], 1, 1, seed=50 + i), f"bias{i}"))
        nodes += [helper.make_node("Sigmoid", [x], [f"s{i}"]), helper.make_node("Mul", [x, f"s{i}"], [f"silu{i}"]),
                  helper.make_node("HardSwish", [x], [f"hs{i}"]), helper.make_node("Add", [n, n], [f"twice{i}"]),
                  helper.make_node("Add", [x, f"bias{i}"], [f"biased{i}"]),
                  helper.make_node("Concat", [f"silu{i}", f"hs{i}"], [f"cat{i}"], axis=1),
                  helper.make_node("Concat", [f"silu{i}", f"hs{i}", f"biased{i}"], [f"wide{i}"], axis=3)]
        for name, dtype in ((f"cat{i}", TensorProto.FLOAT), (f"wide{i}", TensorProto.FLOAT), (f"twice{i}", TensorProto.INT32)):
            outputs.append(helper.make_tensor_value_info(name, dtype, None))
    return proto_model(nodes, inputs, outputs, inits), feeds


def shaped(m) -> None:
    """The shaped loops instead of the flat ones."""
    m.setattr(kernel_module, "flat_elementwise", lambda *a, **kw: False)
    m.setattr(fused, "flat_elementwise", lambda *a, **kw: False)
    m.setattr(movement, "flat_concat", lambda *a, **kw: False)


@pytest.mark.parametrize("board", ["x86_64", "rpi4", "qemu-riscv64-rvv"])
def test_same_bits_as_the_shaped_loops_and_ort(tmp_path, monkeypatch, board):
    if board != "x86_64":
        require_emulator(board)
    model, feeds = activations_model()
    flat = built(model, tmp_path / "flat", board)
    with monkeypatch.context() as m:
        shaped(m)
        per_layer = built(model, tmp_path / "shaped", board)
    assert flat.timings.kernels.compiled < per_layer.timings.kernels.compiled
    got, want, ref = run(flat.artifact, feeds), run(per_layer.artifact, feeds), reference(model, feeds)
    for name in ref:
        if got[name].dtype.kind == "f":  # a vector loop's and a scalar loop's Sigmoid may round apart (contraction)
            np.testing.assert_array_max_ulp(got[name], want[name], maxulp=2)
        else:
            assert got[name].tobytes() == want[name].tobytes(), name
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-5)


def test_every_thread_count_gives_the_same_bits(tmp_path):
    model, feeds = activations_model()
    assert_same_bits_at_thread_counts(built(model, tmp_path, threads=4).artifact, feeds)


def node_units(model, spec, prefix: tuple[str, ...]) -> dict[str, str]:
    """The IR text of each unit of an op type starting with `prefix`, by op type and output name."""
    planned_names = {}

    def wanted(node):
        if node.op_type.startswith(prefix):
            planned_names[node.name] = node.op_type + ":" + node.outputs[0]
            return True
        return False
    return {planned_names[name]: text for name, text in unit_texts(model, spec, wanted).items()}


def test_layers_of_other_shapes_share_one_unit(monkeypatch):
    """The SiLUs, HardSwishes and channel Concats of the three small shapes (none split across threads) emit one IR
    text each per op; the shaped loops one per shape."""
    model, _ = activations_model(SHAPES[:3])
    spec = machine_spec(get_board("x86_64-v3"))
    texts = node_units(model, spec, ("FusedElementwise", "HardSwish", "Concat"))
    kinds = {name.split(":")[0] + (":" + name.split(":")[1][:3] if name.startswith("Concat") else "") for name in texts}
    assert len(set(texts.values())) == len(kinds)
    with monkeypatch.context() as m:
        shaped(m)
        assert len(set(node_units(model, spec, ("FusedElementwise", "HardSwish", "Concat")).values())) == len(texts)


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.int64, np.bool_])
def test_other_dtypes_and_size_one_concat_inputs(tmp_path, dtype):
    """Elementwise ops and Concats of float16, int8, int64 and bool, a Concat whose inputs are 1 wide on its axis,
    against ONNX Runtime: the flat loops taken (fewer units than the shaped ones)."""
    shape, kind = (2, 5, 6, 7), onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    rng = np.random.default_rng(3)
    feeds = {name: (rng.standard_normal(shape) * 3).astype(dtype) for name in ("a", "b")}
    feeds["t"] = (rng.standard_normal((2, 5, 6, 1)) * 3).astype(dtype)
    op = "Or" if dtype == np.bool_ else "Add"
    nodes = [helper.make_node(op, ["a", "b"], ["s"]), helper.make_node("Concat", ["t", "s", "t"], ["c"], axis=3),
             helper.make_node("Concat", ["a", "b"], ["d"], axis=1)]
    inputs = [helper.make_tensor_value_info(n, kind, v.shape) for n, v in feeds.items()]
    model = proto_model(nodes, inputs, [helper.make_tensor_value_info(n, kind, None) for n in ("c", "d")])
    got, ref = run(built(model, tmp_path).artifact, feeds), reference(model, feeds)
    for name in ref:
        np.testing.assert_array_equal(got[name], ref[name])
    texts = node_units(model, machine_spec(get_board("x86_64-v3")), (op, "Concat"))
    assert all("fxc_parallel" not in t and "%\"c0\"" in t for t in texts.values())
