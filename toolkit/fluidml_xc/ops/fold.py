"""Scattering back into an image: Col2Im (sum of sliding blocks) and MaxUnpool.

Col2Im zeroes the output, then adds every column entry into the image pixel it came from; per
spatial dim and kernel offset, the range of block positions that land inside the image is a
build-time table, so there is no bounds test per element. When the blocks tile a 2-D image exactly
(block = stride, no pads or dilation: ConvTranspose 2x2 stride 2, the usual upsampling layer) every output
pixel takes exactly one entry, so each output row is written once, its column vectors interleaved
(a pixel shuffle), with no zero fill. MaxUnpool zeroes the output and writes
each input value at its (run-time) flat index, decomposed over the inferred unpooled shape as the
ONNX reference does (an output_shape larger than that shape keeps the extra border at zero);
indices outside the tensor are skipped.
"""
from __future__ import annotations

import numpy as np

from llvmlite import ir

from ..errors import InputError
from ..kernels.loops import element, loop, nest, offset
from ..kernels.scalar import const
from ..kernels.vectors import load_lanes, store_lanes
from ..opspec import register


def _ints_input(k, i: int, what: str) -> list[int] | None:
    value = k.constant_input(i, what)
    return None if value is None else [int(v) for v in np.ravel(value)]


def zero_fill(k, out) -> None:
    if out.size:
        k.generic(out.shape, [out.identity_access()], [], lambda v, i: [const(out.dtype, 0)])


@register("Col2Im", since=18, heavy=True)
@register("Col2Im", domain="fluidml", notes="ConvTranspose's scatter-add at any opset (passes/conv_transpose.py)")
def lower_col2im(k):
    x, out = k.inputs[0], k.outputs[0]
    b = k.b
    image = _ints_input(k, 1, "image_shape")
    block = _ints_input(k, 2, "block_shape")
    r = len(image)
    dils = [int(v) for v in (k.attr("dilations") or [1] * r)]
    pads = [int(v) for v in (k.attr("pads") or [0] * (2 * r))]
    strides = [int(v) for v in (k.attr("strides") or [1] * r)]
    counts = [(image[d] + pads[d] + pads[r + d] - (dils[d] * (block[d] - 1) + 1)) // strides[d] + 1 for d in range(r)]
    K = int(np.prod(block))
    if x.rank != 3 or x.shape[1] % K or x.shape[2] != int(np.prod(counts)) or min(counts) < 1:
        raise InputError(f"node {k.node.name!r} (Col2Im): input {list(x.shape)} does not match image {image}, block {block}, "
                         f"strides {strides}, pads {pads}, dilations {dils} ({counts} blocks)")
    if _tiles_exactly(x, out, image, block, strides, dils, pads) and x.size:
        _pixel_shuffle(k, x, out, x.shape[1] // K, K, counts, strides)
        return
    zero_fill(k, out)
    if out.size == 0 or x.size == 0:
        return
    N, C = x.shape[0], x.shape[1] // K
    idx_dt = np.dtype(f"int{k.idx_t.width}")
    # per dim d and kernel offset t: block positions l in [lo, hi) with 0 <= l*stride - pad + t*dil < image
    tables = []
    for d in range(r):
        ranges = [_block_range(t * dils[d] - pads[d], strides[d], counts[d], image[d]) for t in range(block[d])]
        tables.append((k.constant_array(np.array([lo for lo, _ in ranges], dtype=idx_dt)),
                       k.constant_array(np.array([hi for _, hi in ranges], dtype=idx_dt))))
    k_strides = [int(np.prod(block[d + 1:])) for d in range(r)]
    l_strides = [int(np.prod(counts[d + 1:])) for d in range(r)]

    def plane(ix):
        n, c = ix
        xbase = offset(k, 0, (n, x.strides[0]), (c, K * x.strides[1]))
        obase = offset(k, 0, (n, out.strides[0]), (c, out.strides[1]))

        def taps(ts):
            def blocks(d, ls):
                if d == r:
                    xo = offset(k, 0, (xbase, 1), *((t, ks * x.strides[1]) for t, ks in zip(ts, k_strides)),
                                *((l, ls_ * x.strides[2]) for l, ls_ in zip(ls, l_strides)))
                    pos = [offset(k, -pads[e], (ls[e], strides[e]), (ts[e], dils[e])) for e in range(r)]
                    oo = offset(k, 0, (obase, 1), *zip(pos, out.strides[2:]))
                    ptr = element(k, out.ptr, oo)
                    b.store(k.s.add(out.dtype, b.load(ptr), b.load(element(k, x.ptr, xo))), ptr)
                    return
                lo, hi = b.load(element(k, tables[d][0], ts[d])), b.load(element(k, tables[d][1], ts[d]))
                with k.for_range(hi, lo) as l:
                    blocks(d + 1, [*ls, l])
            blocks(0, [])
        nest(k, block, taps)
    nest(k, [N, C], plane)


def _tiles_exactly(x, out, image, block, strides, dils, pads) -> bool:
    return (len(image) == 2 and block == strides and strides[1] in (1, 2, 4) and set(dils) == {1} and set(pads) == {0}
            and all(i % s == 0 for i, s in zip(image, strides)) and np.dtype(out.dtype) in (np.float32, np.float64)
            and x.strides[2] == 1 and out.strides[3] == 1)


def _pixel_shuffle(k, x, out, C: int, K: int, counts, strides) -> None:
    """out[n, c, i * sh + a, j * sw + b] = x[n, c * K + a * sw + b, i * cw + j]: per output row (n, c, i, a),
    sw input rows of V columns interleaved into sw * V contiguous outputs; the last cw % V columns one by one."""
    b = k.b
    (sh, sw), cw = strides, counts[1]
    V = k.lanes(out.dtype)
    full = cw // V

    def row(ix):
        n, c, i, a = ix
        xbase = [offset(k, t * x.strides[1], (n, x.strides[0]), (c, K * x.strides[1]), (a, sw * x.strides[1]),
                        (i, cw * x.strides[2])) for t in range(sw)]
        obase = offset(k, 0, (n, out.strides[0]), (c, out.strides[1]), (i, sh * out.strides[2]), (a, out.strides[2]))
        if full:
            with loop(k, full) as j:
                vecs = [load_lanes(k, x.ptr, offset(k, 0, (base, 1), (j, V)), V, 1, False) for base in xbase]
                while len(vecs) > 2:
                    vecs = [b.shuffle_vector(vecs[q], vecs[q + 1], ir.Constant(ir.VectorType(ir.IntType(32), 2 * vecs[q].type.count),
                                                                                 list(range(2 * vecs[q].type.count))))
                            for q in range(0, len(vecs), 2)]
                mask = ir.Constant(ir.VectorType(ir.IntType(32), sw * V), [(m % sw) * V + m // sw for m in range(sw * V)])
                value = vecs[0] if sw == 1 else b.shuffle_vector(vecs[0], vecs[1], mask)
                store_lanes(k, out.ptr, offset(k, 0, (obase, 1), (j, sw * V)), value, sw * V, 1)
        for j in range(full * V, cw):
            for t in range(sw):
                v = b.load(element(k, x.ptr, offset(k, j, (xbase[t], 1))))
                b.store(v, element(k, out.ptr, offset(k, j * sw + t, (obase, 1))))
    nest(k, [x.shape[0], C, counts[0], sh], row)


def _block_range(start: int, stride: int, count: int, size: int) -> tuple[int, int]:
    """Block positions l in [0, count) with 0 <= start + l*stride < size, as [lo, hi)."""
    valid = [l for l in range(count) if 0 <= start + l * stride < size]
    return (valid[0], valid[-1] + 1) if valid else (0, 0)


@register("MaxUnpool", since=9, heavy=True)
def lower_max_unpool(k):
    x, ind, out = k.inputs[0], k.inputs[1], k.outputs[0]
    b = k.b
    sp = x.rank - 2
    kernel = [int(v) for v in k.attr("kernel_shape")]
    strides = [int(v) for v in (k.attr("strides") or [1] * sp)]
    pads = [int(v) for v in (k.attr("pads") or [0] * (2 * sp))]
    inferred = [x.shape[0], x.shape[1]] + [(x.shape[2 + d] - 1) * strides[d] - pads[d] - pads[sp + d] + kernel[d] for d in range(sp)]
    if any(o < i for o, i in zip(out.shape, inferred)):
        raise InputError(f"node {k.node.name!r} (MaxUnpool): output_shape {list(out.shape)} is smaller than the unpooled shape {inferred}")
    zero_fill(k, out)
    if x.size == 0 or out.size == 0:
        return
    total = int(np.prod(inferred))
    idx_dt = np.dtype(f"int{k.idx_t.width}")

    def point(ix):
        i = k.s.cast(ind.dtype, idx_dt, b.load(element(k, ind.ptr, offset(k, 0, *zip(ix, ind.strides)))))
        ok = b.icmp_unsigned("<", i, k.index(total))
        with b.if_then(ok):
            rest, terms = i, []
            for d in reversed(range(x.rank)):
                if d:
                    terms.append((b.urem(rest, k.index(inferred[d])), out.strides[d]))
                    rest = b.udiv(rest, k.index(inferred[d]))
                else:
                    terms.append((rest, out.strides[0]))
            v = b.load(element(k, x.ptr, offset(k, 0, *zip(ix, x.strides))))
            b.store(v, element(k, out.ptr, offset(k, 0, *terms)))
    nest(k, list(x.shape), point)
