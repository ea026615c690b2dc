"""ConvTranspose, in scatter form over a generic nest with per-position tap ranges from build-time tables."""
from __future__ import annotations

from ...kernels.conv_geometry import auto_pad_mode, tap_tables
from ...kernels.loops import element, nest, offset, table_nest
from ...kernels.scalar import const
from ...opspec import register


@register("ConvTranspose", heavy=True)
def lower_conv_transpose(k):
    """Scatter form: every input pixel adds x * w into the output taps it reaches (tables per input position)."""
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    out = k.outputs[0]
    b, s, dt = k.b, k.s, out.dtype
    sp = x.rank - 2
    groups = int(k.attr("group", 1))
    k_sp = list(w.shape[2:])
    strides = list(k.attr("strides") or [1] * sp)
    dils = list(k.attr("dilations") or [1] * sp)
    mode = auto_pad_mode(k)
    if k.attr("pads") is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        out_pad = list(k.attr("output_padding") or [0] * sp)
        pads = []
        for d in range(sp):
            total = strides[d] * (x.shape[2 + d] - 1) + out_pad[d] + (k_sp[d] - 1) * dils[d] + 1 - out.shape[2 + d]
            pads.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
    else:
        pads = [int(p) for p in (k.attr("pads") or [0] * (2 * sp))[:sp]]
    Cig, Cog = x.shape[1] // groups, out.shape[1] // groups
    if out.size == 0:
        return
    if bias is not None:
        k.generic(out.shape, [out.identity_access()], [bias.access([1], out.rank)], lambda v, i: [v[0]])
    else:
        k.generic(out.shape, [out.identity_access()], [], lambda v, i: [const(dt, 0)])
    if x.size == 0:
        return
    tables = tap_tables(k, x.shape[2:], strides, dils, pads, k_sp, out.shape[2:])

    def point(ix):
        n, g, ci, pos = ix[0], ix[1], ix[2], ix[3:]
        ic = b.add(b.mul(g, k.index(Cig)), ci)
        xv = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (ic, x.strides[1]), *zip(pos, x.strides[2:]))))

        def tap(ts):
            oi = [b.sub(b.add(b.mul(pos[d], k.index(strides[d])), b.mul(ts[d], k.index(dils[d]))), k.index(pads[d])) for d in range(sp)]
            with k.for_range(Cog) as co:
                oc = b.add(b.mul(g, k.index(Cog)), co)
                wv = b.load(element(k, w.ptr, offset(k, 0, (ic, w.strides[0]), (co, w.strides[1]), *zip(ts, w.strides[2:]))))
                p = element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (oc, out.strides[1]), *zip(oi, out.strides[2:])))
                b.store(s.add(dt, b.load(p), s.mul(dt, xv, wv)), p)
        table_nest(k, tables, pos, tap)
    nest(k, [x.shape[0], groups, Cig, *x.shape[2:]], point)
