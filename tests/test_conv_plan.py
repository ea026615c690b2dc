"""kernels/conv_plan.py: the one plan the Conv emitters (ops/conv/) and the cost model (fluid/geometry.py) read.

The emitters are composed, not mixed in: each reads only the fields the ConvPlan, its ConvShape and ConvBlocking and
the ConvKernel declare (checked on the source with ast). conv_shape views convs as the 2-D kernel runs them, and a
target whose architecture target/arch.py does not know is refused instead of getting another family's forms."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from fluidml_xc.errors import InputError
from fluidml_xc.kernels.conv_geometry import ConvBlocking, TargetForms
from fluidml_xc.kernels.conv_plan import ConvPlan, ConvShape, conv_shape, plan_conv
from fluidml_xc.ops.conv.walk import ConvKernel

EMITTERS = Path(__file__).resolve().parent.parent / "toolkit" / "fluidml_xc" / "ops" / "conv"


def _names(cls) -> set[str]:
    """Declared fields, properties and methods of a class."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return fields | {n for n in vars(cls) if not n.startswith("__")}


DECLARED = {"p": _names(ConvPlan), "s": _names(ConvShape), "bl": _names(ConvBlocking), "c": _names(ConvKernel)}
"""Attribute of the emitter -> what may be read through it."""


@pytest.mark.parametrize("module", ["rows.py", "channels.py", "depthwise.py"])
def test_emitters_read_only_what_the_plan_and_kernel_declare(module):
    tree = ast.parse((EMITTERS / module).read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes
    for cls in classes:
        assert not cls.bases, f"{cls.name}: a mixin ({module})"
        methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
        for node in ast.walk(cls):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
                continue
            assert node.attr in methods or node.attr in DECLARED or node.attr == "k", f"{module}: self.{node.attr}"
        for node in ast.walk(cls):
            inner = node.value if isinstance(node, ast.Attribute) else None
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self" \
                    and inner.attr in DECLARED:
                assert node.attr in DECLARED[inner.attr], f"{module}: self.{inner.attr}.{node.attr} is not declared"


def test_a_plan_is_frozen():
    s = conv_shape(((1, 8, 10, 10), (800, 100, 10, 1)), ((1, 16, 10, 10), (1600, 100, 10, 1)),
                   ((16, 8, 3, 3), (72, 9, 3, 1)), None, [1, 1], [1, 1], [1, 1], 1)
    plan = plan_conv(s, TargetForms("x86_64-unknown-linux-gnu"), dtype="float32", V=8, w_const=True, finite=True)
    assert plan.blocking.kind == "channels" and plan.fresh_broadcasts and not plan.settle_rows
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.V = 4


def test_conv_shape_views_kx1_convs_along_the_row_and_flat_1x1_convs_as_one_row():
    x, out = ((1, 4, 40, 1), (160, 40, 1, 1)), ((1, 8, 40, 1), (320, 40, 1, 1))
    kx1 = conv_shape(x, out, ((8, 4, 3, 1), (12, 3, 1, 1)), None, [1, 1], [1, 1], [1, 0], 1)
    assert (kx1.H, kx1.W, kx1.KH, kx1.KW, kx1.pw, kx1.xs) == (1, 40, 1, 3, 1, (160, 40, 0, 1))
    column = conv_shape(x, out, ((8, 4, 3, 1), (12, 3, 1, 1)), None, [1, 1], [1, 1], [1, 0], 1, kx1_along_row=False)
    assert (column.H, column.W, column.KH, column.KW) == (40, 1, 3, 1)
    flat = conv_shape(((1, 4, 6, 7), (168, 42, 7, 1)), ((1, 8, 6, 7), (336, 42, 7, 1)), ((8, 4, 1, 1), (4, 1, 1, 1)),
                      ((1, 8, 6, 7), (336, 42, 7, 1)), [1, 1], [1, 1], [0, 0], 1)
    assert flat.flat and (flat.H, flat.W, flat.OW, flat.xs, flat.rs) == (1, 42, 42, (168, 42, 0, 1), (336, 42, 0, 1))


def test_an_unknown_architecture_is_refused_not_given_another_familys_forms():
    s = conv_shape(((1, 8, 10, 10), (800, 100, 10, 1)), ((1, 8, 10, 10), (800, 100, 10, 1)),
                   ((8, 1, 3, 3), (9, 9, 3, 1)), None, [1, 1], [1, 1], [1, 1], 8)
    with pytest.raises(InputError, match="target/arch.py"):
        plan_conv(s, TargetForms("powerpc64le-unknown-linux-gnu"), dtype="float32", V=4, w_const=True, finite=True)
    aarch64 = plan_conv(s, TargetForms("aarch64-unknown-linux-gnu"), dtype="float32", V=4, w_const=True, finite=True)
    assert aarch64.blocking.row_pairs and aarch64.blocking.edges


@pytest.mark.parametrize("triple,V,layout,C,k,want", [
    ("x86_64-unknown-linux-gnu", 8, "NHWC", 512, 3, True),    # AVX2: 21 lines of a channel's taps in one L1 set
    ("x86_64-unknown-linux-gnu", 4, "NHWC", 512, 3, True),    # SSE
    ("x86_64-unknown-linux-gnu", 8, "NHWC", 256, 3, True),    # 12 lines in a set of 8 ways
    ("x86_64-unknown-linux-gnu", 8, "NHWC", 128, 3, False),   # 6 lines: taps stay innermost
    ("x86_64-unknown-linux-gnu", 16, "NHWC", 512, 3, False),  # AVX-512 keeps every tap in one loop over the channels
    ("x86_64-unknown-linux-gnu", 8, "NCHW", 512, 3, False),   # channel planes: no line shared by 16 channels
    ("x86_64-unknown-linux-gnu", 8, "NHWC", 512, 1, False),   # one tap
    ("aarch64-unknown-linux-gnu", 4, "NHWC", 512, 3, False),
])
def test_channel_vectors_run_taps_outermost_where_their_lines_crowd_an_l1_set(triple, V, layout, C, k, want):
    H, OC = 14, 32
    OH = (H + 2 * (k // 2) - k) // 2 + 1
    nhwc = lambda c, h: (h * h * c, 1, h * c, c)  # noqa: E731
    nchw = lambda c, h: (c * h * h, h * h, h, 1)  # noqa: E731
    st = nhwc if layout == "NHWC" else nchw
    s = conv_shape(((1, C, H, H), st(C, H)), ((1, OC, OH, OH), st(OC, OH)), ((OC, C, k, k), (C * k * k, k * k, k, 1)),
                   None, [2, 2], [1, 1], [k // 2] * 2, 1)
    plan = plan_conv(s, TargetForms(triple), dtype="float32", V=V, w_const=True, finite=True)
    assert plan.blocking.kind == "channels"
    assert plan.taps_outer is want


@pytest.mark.parametrize("triple,V,want", [
    ("x86_64-unknown-linux-gnu", 8, (0, 6)),    # AVX2: 6 tiles of 6, then blocks of 4, 4 and 5 pixels (8-10 accumulators)
    ("x86_64-unknown-linux-gnu", 16, (0, 4)),   # AVX-512: 4 tiles of 12 and a lone pixel, as before
    ("aarch64-unknown-linux-gnu", 4, (0, 8)),   # NEON: unchanged
])
def test_a_flat_channels_last_row_leaves_no_lone_pixel_waiting_on_the_fma_latency(triple, V, want):
    C, OC, H = 64, 64, 7  # 49 pixels, flat
    nhwc = lambda c: (H * H * c, 1, H * c, c)  # noqa: E731
    s = conv_shape(((1, C, H, H), nhwc(C)), ((1, OC, H, H), nhwc(OC)), ((OC, C, 1, 1), (C, 1, 1, 1)), None,
                   [1, 1], [1, 1], [0, 0], 1)
    plan = plan_conv(s, TargetForms(triple), dtype="float32", V=V, w_const=True, finite=True)
    assert s.flat and plan.blocking.kind == "channels"
    assert plan.col_blocks == want


def test_tap_tables_are_tap_range_per_position():
    """conv_geometry.tap_ranges (the border tables, computed as arrays) gives tap_range at every output position:
    negative bases, dilations and pads wider than the kernel included."""
    import itertools

    from fluidml_xc.kernels.conv_geometry import tap_range, tap_ranges

    for outs, stride, dil, pad, taps, size in itertools.product([1, 5, 17], [1, 2, 3], [1, 2, 3], [0, 1, 2, 5],
                                                                [1, 3, 7], [1, 4, 9, 30]):
        lo, hi = tap_ranges(outs, stride, dil, pad, taps, size)
        assert list(zip(lo.tolist(), hi.tolist())) == [tap_range(o, stride, dil, pad, taps, size) for o in range(outs)]
