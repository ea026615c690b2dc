"""Winograd convolution F(m x m, 3 x 3) (Lavin & Gray): the transforms, which convs may use it, its blocking and the
weight transform. Pure numpy: the emitter is ops/conv/winograd.py, the price fluid/winograd_costs.py.

A tile of m x m outputs reads an alpha x alpha input patch (alpha = m + 2); per channel pair the tile costs alpha^2
multiplications instead of 9 m^2: V = B^T d B (input), U = G g G^T (weights, at build time), Y = A^T (sum_c U V) A
(output). The sum over channels is, for each of the alpha^2 points, a GEMM (tiles x Cin) @ (Cin x Cout) run by the
blocked GEMM's tile (kernels/matmul_blocked.py outer_accumulate), vectors over output channels."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .matmul_geometry import MR_OUTER, outer_tile

_BT2 = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
_G2 = [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]
_AT2 = [[1, 1, 1, 0], [0, 1, -1, -1]]
_BT4 = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0],
        [0, 4, 0, -5, 0, 1]]
_G4 = [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6],
       [0, 0, 1]]
_AT4 = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
_BT6 = [[1, 0, -21 / 4, 0, 21 / 4, 0, -1, 0], [0, 1, 1, -17 / 4, -17 / 4, 1, 1, 0], [0, -1, 1, 17 / 4, -17 / 4, -1, 1, 0],
        [0, 1 / 2, 1 / 4, -5 / 2, -5 / 4, 2, 1, 0], [0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1, 0],
        [0, 2, 4, -5 / 2, -5, 1 / 2, 1, 0], [0, -2, 4, 5 / 2, -5, -1 / 2, 1, 0], [0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1]]
_G6 = [[1, 0, 0], [-2 / 9, -2 / 9, -2 / 9], [-2 / 9, 2 / 9, -2 / 9], [1 / 90, 1 / 45, 2 / 45], [1 / 90, -1 / 45, 2 / 45],
       [32 / 45, 16 / 45, 8 / 45], [32 / 45, -16 / 45, 8 / 45], [0, 0, 1]]
_AT6 = [[1, 1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1 / 2, -1 / 2, 0], [0, 1, 1, 4, 4, 1 / 4, 1 / 4, 0],
        [0, 1, -1, 8, -8, 1 / 8, -1 / 8, 0], [0, 1, 1, 16, 16, 1 / 16, 1 / 16, 0], [0, 1, -1, 32, -32, 1 / 32, -1 / 32, 1]]


@dataclass(frozen=True)
class Transforms:
    """F(m x m, 3 x 3): B^T (alpha x alpha), G (alpha x 3), A^T (m x alpha)."""

    m: int
    BT: np.ndarray
    G: np.ndarray
    AT: np.ndarray

    @property
    def alpha(self) -> int:
        return self.m + 2


TRANSFORMS = {m: Transforms(m, np.array(bt, float), np.array(g, float), np.array(at, float))
              for m, bt, g, at in ((2, _BT2, _G2, _AT2), (4, _BT4, _G4, _AT4), (6, _BT6, _G6, _AT6))}
"""The tile sizes built: F(2x2), F(4x4) (points 0, +-1, +-2) and F(6x6) (0, +-1, +-2, +-1/2; wincnn's matrices)."""
BLOCKED_ORDERS = {f"wino{m}": m for m in TRANSFORMS}
"""The blocked form: each block of tiles transformed into a stack buffer, the weights read once per block."""
WHOLE_ORDERS = {f"wimg{m}": m for m in TRANSFORMS}
"""The whole-image form: the input transform is its own node (WinogradInput, fluid/winograd_split.py) writing V to a
planned arena tensor; the conv reads V, split over panels of output channels, each weight read once per chunk."""
ORDERS = {**BLOCKED_ORDERS, **WHOLE_ORDERS}
"""The Conv loop orders that select Winograd (fluid picks them like the direct orders, fluid/winograd_costs.py)."""
ALLOWED_ATTR = "_winograd"
"""Node attribute (passes/winograd.py): the tile sizes this conv may use, largest first; absent: direct only."""
WHOLE_ATTR = "_winograd_whole"
"""Node attribute (passes/winograd.py): the tile sizes whose whole-image V fits the memory budget too."""
V_INPUT_ATTR = "_winograd_v"
"""Set on a conv split by fluid/winograd_split.py: its last input is the transformed input V."""
STACK_BYTES = 160 * 1024
"""The transformed input of one block of tiles (alpha^2 x tiles x Cin floats) lives on the stack within this."""
MAX_BLOCK_TILES = 4 * MR_OUTER
"""Tiles per block at most: more only lengthens the transformed input's stay in cache."""


MIN_GROUP_CHANNELS = 8
"""A grouped conv qualifies with at least this many input and output channels per group (depthwise never)."""


def grouped_ok(groups: int, cin: int, cout: int) -> bool:
    """One group, or groups of at least MIN_GROUP_CHANNELS input and output channels."""
    return groups == 1 or (cin // groups >= MIN_GROUP_CHANNELS and cout // groups >= MIN_GROUP_CHANNELS)


def eligible(shape, dtype: str, w_const: bool, finite: bool) -> bool:
    """A 2-D float32 3x3 conv at stride 1, dilation 1, groups as grouped_ok allows, constant finite weights, static
    dims, outputs of at least 2 x 2 (any padding)."""
    s = shape
    return (dtype == "float32" and w_const and finite and s.dyn is None and not s.flat and (s.KH, s.KW) == (3, 3)
            and (s.sh, s.sw, s.dh, s.dw) == (1, 1, 1, 1) and grouped_ok(s.G, s.C, s.OC) and s.OH >= 2 and s.OW >= 2)


def growth(m: int) -> float:
    """Transformed weight bytes over the original's: alpha^2 / 9."""
    return TRANSFORMS[m].alpha ** 2 / 9


@dataclass(frozen=True)
class WinogradPlan:
    """The Winograd kernel's blocking: blocks of T tiles per image and group, each transformed into a stack buffer,
    then per panel of NR output channels and per MR tiles the alpha^2 GEMM tiles, then the output transform."""

    m: int
    alpha: int
    TH: int
    TW: int
    """Tile rows and columns per image (ceil(OH / m), ceil(OW / m))."""
    T: int
    """Tiles per block."""
    blocks: int
    """Blocks per image and group."""
    MR: int
    NR: int
    """The GEMM's register tile: MR tiles x NR output channels (outer_tile)."""

    whole: bool = False
    """The whole-image form: T is the chunk of tiles whose GEMM results (alpha^2 x T x NR) stay on the stack while
    one point's weight panel serves them all; V (v_shape) is an arena tensor."""

    @property
    def tiles(self) -> int:
        return self.TH * self.TW


def v_shape(s, m: int) -> tuple[int, int, int, int, int]:
    """The whole-image transformed input V[image][group][point][tile][channel] of conv shape `s` at F(m x m)."""
    return (s.N, s.G, (m + 2) ** 2, -(-s.OH // m) * -(-s.OW // m), s.Cig)


WIDEST_PANEL = 64
"""Output channels of the widest GEMM panel a whole-image conv splits over (kernels/matmul_geometry.py outer_tile: 4
vectors of 16 floats, AVX-512); V's copies are the same for every code variant of a build."""


def v_copies(private_caches: bool, threads: int, images: int, channels: int) -> int:
    """Copies of V a whole-image conv of `images` images x groups and `channels` output channels per group gets:
    where cores may not share a cache (the target's `private_caches`), one per thread that shares an image, so each
    thread transforms the whole image into the copy it reads and no line of V moves between cores; at most one per
    panel of output channels (a copy no panel reads is not worth its transform), and one when every thread has its
    own images. Else one, transformed by all threads together (docs/WINOGRAD.md "Threads"). With copies, the
    transform also writes `<conv>.winograd_copy`: per tile of the split, the copy that holds its image's V (a call
    of the transform over several tiles fills one copy for all of them)."""
    if not private_caches or threads <= images:
        return 1
    return max(1, min(-(-threads // images), -(-channels // WIDEST_PANEL)))


def plan_winograd(s, m: int, V: int, accumulators: int, whole: bool = False,
                  tile: tuple[int, int] | None = None) -> WinogradPlan | None:
    """The blocking of F(m x m, 3 x 3) for conv shape `s` at V lanes; None when one tile's transformed input does not
    fit the stack budget (blocked form). `tile`: the CPU's hand-scheduled GEMM tile (TargetForms.gemm_tile), taken
    when the GEMM has as many tiles and output channels."""
    alpha = m + 2
    TH, TW = -(-s.OH // m), -(-s.OW // m)
    if tile is not None and (TH * TW < tile[0] or s.Cog < tile[1]):
        tile = None
    if whole:
        mr, nr = tile or outer_tile(TH * TW, s.Cog, V, accumulators)
        fit = max(mr, STACK_BYTES // (alpha * alpha * nr * 4) // mr * mr)
        T = min(fit, -(-TH * TW // mr) * mr)
        return WinogradPlan(m, alpha, TH, TW, T, -(-TH * TW // T), mr, nr, True)
    per_tile = alpha * alpha * s.Cig * 4
    fit = STACK_BYTES // per_tile
    if fit < 1:
        return None
    mr0 = tile[0] if tile else max(1, min(MR_OUTER, accumulators // 2))
    T = min(fit, TH * TW, MAX_BLOCK_TILES)
    if T >= mr0:
        T -= T % mr0
    mr, nr = tile or outer_tile(T, s.Cog, V, accumulators)
    return WinogradPlan(m, alpha, TH, TW, T, -(-TH * TW // T), mr, nr)


def transform_weights(value: np.ndarray, m: int) -> np.ndarray:
    """(Cout, Cin, 3, 3) weights -> U (alpha^2, Cin, Cout) float32, U[xi] = (G g G^T)[xi] computed in float64."""
    G = TRANSFORMS[m].G
    u = np.einsum("ak,oikl,bl->abio", G, value.astype(np.float64), G)
    return np.ascontiguousarray(u.reshape(-1, value.shape[1], value.shape[0]).astype(np.float32))


def reference(x: np.ndarray, w: np.ndarray, pads: tuple[int, int], m: int, out_hw: tuple[int, int]) -> np.ndarray:
    """F(m x m, 3 x 3) in float32 numpy over NCHW x (the kernel's arithmetic in another order): the error model's
    and the tests' reference for the transforms."""
    t = TRANSFORMS[m]
    a = t.alpha
    N, C, H, W = x.shape
    OH, OW = out_hw
    TH, TW = -(-OH // m), -(-OW // m)
    ph, pw = pads
    padded = np.zeros((N, C, TH * m + 2, TW * m + 2), np.float32)
    src = x[:, :, max(0, -ph):, max(0, -pw):]
    hh, ww = min(src.shape[2], padded.shape[2] - ph), min(src.shape[3], padded.shape[3] - pw)
    padded[:, :, ph:ph + hh, pw:pw + ww] = src[:, :, :hh, :ww]
    u = transform_weights(w, m).reshape(a, a, C, -1)
    out = np.zeros((N, u.shape[-1], TH * m, TW * m), np.float32)
    BT, AT = t.BT.astype(np.float32), t.AT.astype(np.float32)
    for th in range(TH):
        for tw in range(TW):
            d = padded[:, :, th * m:th * m + a, tw * m:tw * m + a]
            v = np.einsum("ik,nckl,jl->ijnc", BT, d, BT)
            mm = np.einsum("ijnc,ijco->ijno", v, u)
            out[:, :, th * m:(th + 1) * m, tw * m:(tw + 1) * m] = np.einsum("ki,ijno,lj->nokl", AT, mm, AT)
    return out[:, :, :OH, :OW]
