"""WinogradInput (domain "fluidml"): the whole-image Winograd form's input transform (fluid/winograd_split.py puts it
before a conv whose loop order is a kernels/winograd.py WHOLE_ORDERS one). Input X (N, C, H, W) in any layout, output
V[image][group][point][tile][channel] (kernels/winograd.py v_shape), an ordinary planned arena tensor; attributes m,
pads (top, left), group and the conv's output size out_hw. Split over images, groups and runs of neighbouring tiles
(kernels/split.py chunk_count: one tile is too little work to hand out alone): every tile writes its own V entries,
so every thread count gives the same bits."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ...errors import InputError
from ...kernels.matmul_blocked import add_index, mul_index
from ...kernels.split import chunk_count
from ...kernels.winograd import TRANSFORMS, WinogradPlan
from ...opspec import OUR_DOMAIN, register
from .winograd import WINOGRAD_TILES, WinogradConv, offset, run_time_channels, spread_items


@dataclass(frozen=True)
class _Image:
    """The conv shape facts the input transform reads."""

    N: int
    G: int
    H: int
    W: int
    ph: int
    pw: int
    xs: tuple[int, ...]


class InputTransform(WinogradConv):
    """WinogradConv's input transform (stage 1) writing every tile of the image to the arena tensor V."""

    def __init__(self, k, x, v, m: int, pads: tuple[int, int], groups: int, out_hw: tuple[int, int], copies: int = 1,
                 held=None):
        self.k, self.dt, self.t = k, np.dtype(v.dtype), TRANSFORMS[m]
        N, C, H, W = x.shape
        self.s = _Image(N, groups, H, W, pads[0], pads[1], tuple(x.strides))
        TH, TW = -(-out_hw[0] // m), -(-out_hw[1] // m)
        self.wp = WinogradPlan(m, m + 2, TH, TW, TH * TW, 1, 1, 1)
        self.V, self.A2, self.Ci = k.lanes(self.dt), (m + 2) ** 2, C // groups
        self.xp, self.vbuf, self.vs = x.ptr, v.ptr, tuple(v.strides)
        self.copies, self.held = copies, held
        if tuple(v.shape) != (copies * N, groups, self.A2, TH * TW, self.Ci) or self.vs[4] != 1:
            raise InputError(f"node {k.node.name!r} (WinogradInput): output {v.name!r} is {tuple(v.shape)} with strides "
                             f"{self.vs}; the transform writes a row-major {(copies * N, groups, self.A2, TH * TW, self.Ci)}")
        self.n = self.g = None
        self.work = float(N) * groups * self.wp.tiles * self.A2 * self.Ci * 8
        self.per = -(-self.wp.tiles // chunk_count(self.wp.tiles, self.work,
                                                   -(-chunk_count(1 << 30, self.work) // (N * groups))))
        runs = -(-self.wp.tiles // self.per)
        self.rt = run_time_channels(k)
        self.load_geometry(dict(v0=self.vs[0], v1=self.vs[1], v2=self.vs[2], per=self.per, runs=runs,
                                items=N * groups * runs, chunks=min(N * groups * runs, WINOGRAD_TILES)))
        self.ci = self.f["Ci"] if self.rt else self.Ci
        self.vst = (self.f["v0"], self.f["v1"], self.f["v2"], self.ci)

    def emit(self) -> None:
        """Runs of `per` neighbouring tiles per (image, group), spread over the shared kernels' tiles."""
        s, k, b, f = self.s, self.k, self.k.b, self.f
        if self.copies > 1:
            self.emit_copies(self.work)
            return
        with spread_items(k, f["items"], f["chunks"], self.work) as item:
            image, c = b.udiv(item, f["runs"]), b.urem(item, f["runs"])
            n, g = b.udiv(image, k.index(s.G)), b.urem(image, k.index(s.G))
            self.n, self.g = n, g
            t0 = b.mul(c, f["per"])
            with k.for_range(f["per"]) as i:
                tt = add_index(k, t0, i)
                with b.if_then(b.icmp_signed("<", tt, f["tiles"])):
                    self.transform_input(n, g, tt, tt)

    def emit_copies(self, work: float) -> None:
        """Tile (n, g, c) of the split [images, groups, copies]: the first tile of its image and group in this call's
        range transforms the image into its own copy c; every tile records that copy in `held`, where the conv's
        tile reads it (one call over all tiles, as on one thread, transforms each image once)."""
        s, k, b = self.s, self.k, self.k.b
        with k.parallel_tiles([s.N, s.G, self.copies], work * self.copies) as (n, g, c):
            t = self.copy_tile(n, g, c)
            first = b.sub(t, c)
            if k.region_begin is not None:
                first = k.imax(first, k.region_begin)
            copy = b.sub(c, b.sub(t, first))
            k.store_ptr(copy if copy.type.width == 32 else b.trunc(copy, ir.IntType(32)), self.held, np.dtype(np.int32), t)
            with b.if_then(b.icmp_signed("==", t, first)):
                self.n, self.g = add_index(k, mul_index(k, copy, s.N), n), g
                with k.for_range(self.f["tiles"]) as tt:
                    self.transform_input(n, g, tt, tt)

    def v_at(self, t, point: int, c0):
        k = self.k
        base = add_index(k, add_index(k, mul_index(k, self.n, self.vst[0]), mul_index(k, self.g, self.vst[1])),
                         mul_index(k, t, self.vst[3]))
        return add_index(k, add_index(k, base, offset(k, (point, self.vst[2]))), c0)

    @property
    def v_point_step(self) -> int:
        return self.vst[2]


@register("WinogradInput", domain=OUR_DOMAIN, strided=True, heavy=True,
          notes="the whole-image Winograd input transform (fluid/winograd_split.py)")
def lower_winograd_input(k):
    pads = tuple(int(p) for p in k.attr("pads"))
    copies = int(k.attr("copies", 1))
    InputTransform(k, k.inputs[0], k.outputs[0], int(k.attr("m")), (pads[0], pads[1]), int(k.attr("group", 1)),
                   tuple(int(v) for v in k.attr("out_hw")), copies, k.outputs[1].ptr if copies > 1 else None).emit()
