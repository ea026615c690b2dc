"""ImageDecoder (opset 20): a uint8 1-D tensor of encoded bytes -> a uint8 [H, W, C] image (docs/IMAGES.md).

The kernel calls the runtime's `fxc_image_decode` (runtime_c/image/fxc_image.c, stb_image), linked into the
artifacts whose graph holds the op (emit/image_runtime.py). The output's shape is either

- exact: the model declares the output's shape [H, W, C] with every dim fixed (value_info or a graph output); the
  output is an ordinary static tensor any op may read, and an image of another size fails the run;
- bounded: `--max-dim NODE=N` (or the output's name) bounds height and width by N; the output is a data-dependent
  output (frontend/shapes.py: graph outputs only, through Identity/Cast) written dense at its actual dims.

Bytes that are not an image of a compiled format (JPEG, PNG, BMP, PNM, GIF), a corrupt or truncated file, or an image
over the bound fail the run (OpSpec.run_check: FXC_ERR_RUN, the JIT's RunCheckFailed); nothing is written past the
output's buffer. The encoded length may vary at run time (`--input-shape data=1..N`).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..ir import DEFAULT_BOUND
from ..opspec import register

I64 = ir.IntType(64)
SYMBOL = "fxc_image_decode"
FORMATS = "JPEG, PNG, BMP, PNM or GIF"
MARKS_ATTR = "_dynamic_dims"
"""frontend/shapes.py's mark of a node with data-dependent outputs (set by the frontend after bound_image)."""
CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def _pixel_format(attrs: dict, where: str) -> str:
    fmt = attrs.get("pixel_format", "RGB")
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    if fmt not in CHANNELS:
        raise InputError(f"node {where!r} (ImageDecoder): pixel_format {fmt!r} is not one of RGB, BGR, Grayscale")
    return fmt


def bound_image(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None,
                declared=None) -> list[tuple]:
    """[(uint8, shape, data-dependent dims)]: the declared [H, W, C] exactly (`declared`: output name -> the shape
    the model declares), else [N, N, C] under --max-dim NODE=N with H and W data-dependent."""
    x = inputs[0] if inputs else None
    if x is None or len(x.shape) != 1 or np.dtype(x.dtype) != np.uint8:
        raise InputError(f"node {where!r} (ImageDecoder): the input must be a 1-D uint8 tensor of encoded bytes")
    fmt = _pixel_format(attrs, where)
    c = CHANNELS[fmt]
    shape = next(iter((declared or {}).values()), None)
    if shape is not None:
        if len(shape) != 3 or shape[2] != c or min(shape) < 1:
            raise InputError(f"node {where!r} (ImageDecoder): the model declares its output {list(shape)}, but a "
                             f"{fmt} image is [H, W, {c}]: fix the declared shape")
        return [(np.dtype(np.uint8), tuple(int(d) for d in shape), ())]
    if not max_dims:
        raise InputError(f"node {where!r} (ImageDecoder): the decoded image's size depends on the data: bound it with "
                         f"--max-dim {where}=N (the largest height and width accepted), or declare the output's "
                         f"shape [H, W, {c}] in the model")
    named = {k: v for k, v in max_dims.items() if k != DEFAULT_BOUND} or max_dims
    n = min(int(v) for v in named.values())
    return [(np.dtype(np.uint8), (n, n, c), (0, 1))]


def run_check_image(graph, node) -> str:
    """The one line of a run this node fails (every run can: the bytes are data)."""
    h, w, _ = graph.tensors[node.outputs[0]].shape
    where = f"ImageDecoder node {node.name!r}"
    if node.attrs.get(MARKS_ATTR):
        return (f"{where}: the data in this run is not a {FORMATS} image of at most {h}x{w} pixels, or it is corrupt "
                f"or truncated; the outputs are not valid: feed such an image, or raise the bound (--max-dim {node.name}=N)")
    return (f"{where}: the data in this run is not a {FORMATS} image of {h}x{w} pixels (the shape the model declares "
            f"for {node.outputs[0]!r}), or it is corrupt or truncated; the outputs are not valid: feed such an image")


@register("ImageDecoder", since=20, heavy=True, runtime_extents=True, output_bound=bound_image, run_check=run_check_image,
          notes="JPEG, PNG, BMP, PNM, GIF (stb_image; JPEG within 3 of libjpeg): docs/IMAGES.md")
def lower_image_decoder(k):
    data, out = k.inputs[0], k.outputs[0]
    b = k.b
    h, w, c = out.shape
    length = k.as_index(k.extent(data, 0))
    if k.idx_t.width < 64:
        length = b.zext(length, I64)
    dims = k.dims_out.get(0)
    if dims is None:
        dims = b.bitcast(k.local(ir.ArrayType(I64, 3)), I64.as_pointer())
    u8p = ir.IntType(8).as_pointer()
    fn = k.module.globals.get(SYMBOL) or ir.Function(k.module, ir.FunctionType(ir.IntType(32), [
        u8p, I64, u8p, I64, I64, I64, I64, I64, I64.as_pointer()]), SYMBOL)
    bgr = _pixel_format(k.node.attrs, k.node.name) == "BGR"
    rc = b.call(fn, [b.bitcast(data.ptr, u8p), length, b.bitcast(out.ptr, u8p), I64(h), I64(w), I64(c), I64(int(bgr)),
                     I64(int(k.dims_out.get(0) is None)), dims])
    with b.if_then(b.icmp_signed("!=", rc, ir.Constant(ir.IntType(32), 0)), likely=False):
        b.store(I64(k.check_code), b.bitcast(k.status, I64.as_pointer()))
