"""Conv of any rank (and integer Conv): a generic nest with per-position tap ranges from build-time tables, or computed
at run time along dims that vary (ir.Tensor.dyn)."""
from __future__ import annotations

from ...kernels.conv_geometry import runtime_tap_range, tap_tables
from ...kernels.epilogue import epilogue
from ...kernels.loops import element, nest, offset, table_nest
from ...kernels.scalar import const, llvm_type


def conv_generic(k, x, w, bias, out, strides, dils, pads, groups, epi=None, residual=None):
    """Any-rank Conv with tap ranges from build-time tables (no bounds tests per tap)."""
    b, s, dt = k.b, k.s, out.dtype
    sp = x.rank - 2
    Cig, Cog = x.shape[1] // groups, out.shape[1] // groups
    tables = None if k.dynamic else tap_tables(k, out.shape[2:], strides, dils, pads, w.shape[2:], x.shape[2:])
    sizes = [k.extent(x, 2 + d) for d in range(sp)]

    def taps_of(pos, fn):
        if not k.dynamic:
            table_nest(k, tables, pos, fn)
            return
        spans = [runtime_tap_range(k, pos[d], strides[d], dils[d], pads[d], w.shape[2 + d], sizes[d]) for d in range(sp)]
        nest_ranges(k, spans, fn)

    def point(ix):
        n, g, co, pos = ix[0], ix[1], ix[2], ix[3:]
        oc = b.add(b.mul(g, k.index(Cog)), co)
        init = b.load(element(k, bias.ptr, offset(k, 0, (oc, bias.strides[0])))) if bias is not None else const(dt, 0)
        acc = k.local(llvm_type(dt), init)

        def over_ci(ci):
            ic = b.add(b.mul(g, k.index(Cig)), ci)

            def tap(ts):
                xi = [b.sub(b.add(b.mul(pos[d], k.index(strides[d])), b.mul(ts[d], k.index(dils[d]))), k.index(pads[d])) for d in range(sp)]
                xv = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (ic, x.strides[1]), *zip(xi, x.strides[2:]))))
                wv = b.load(element(k, w.ptr, offset(k, 0, (oc, w.strides[0]), (ci, w.strides[1]), *zip(ts, w.strides[2:]))))
                b.store(s.add(dt, b.load(acc), s.mul(dt, xv, wv)), acc)
            taps_of(pos, tap)
        with k.for_range(Cig) as ci:
            over_ci(ci)
        result = b.load(acc)
        if epi:
            res = None
            if residual is not None:
                rs = residual.strides
                res = lambda: b.load(element(k, residual.ptr, offset(k, 0, (n, rs[0]), (oc, rs[1]), *zip(pos, rs[2:]))))
            result = epilogue(k, epi, result, res)
        b.store(result, element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (oc, out.strides[1]), *zip(pos, out.strides[2:]))))
    nest(k, [k.extent(x, 0), groups, Cog, *(k.extent(out, 2 + d) for d in range(sp))], point)


def nest_ranges(k, spans, fn, taps=()):
    """Loops over t_d in spans[d] = [lo_d, hi_d) (index values); fn(list of tap values)."""
    if len(taps) == len(spans):
        fn(list(taps))
        return
    lo, hi = spans[len(taps)]
    with k.for_range(hi, lo) as t:
        nest_ranges(k, spans, fn, (*taps, t))
