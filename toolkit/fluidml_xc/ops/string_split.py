"""StringSplit (docs/STRINGS.md): Python's str.split per element (kernels/strings.py split_parts); `substrings` has
a data-dependent last dim (the most parts of any element; shorter rows padded with ""), bounded at build time by
the parts a string of --max-string-bytes can have, maxsplit + 1, or a smaller --max-dim NODE=N (frontend/shapes.py).
A run that needs more parts than that bound fails (FXC_ERR_RUN)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir import DEFAULT_BOUND
from ..kernels import strings as ks
from ..opspec import register
from ..strings import DEFAULT_MAX_STRING_BYTES, capacity, encode, room_for

I64 = ks.I64


def _delimiter(attrs: dict) -> bytes:
    value = attrs.get("delimiter", "") or ""
    return encode(value) if not isinstance(value, bytes) else value


def _maxsplit(attrs: dict) -> int:
    value = attrs.get("maxsplit")
    return -1 if value is None else int(value)


def most_parts(delimiter: bytes, max_bytes: int, maxsplit: int) -> int:
    """The most parts one string of up to max_bytes bytes splits into."""
    parts = max_bytes // len(delimiter) + 1 if delimiter else (max_bytes + 1) // 2
    return parts if maxsplit < 0 else min(parts, maxsplit + 1)


def bound_split(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None,
                declared=None, max_string_bytes=DEFAULT_MAX_STRING_BYTES) -> list[tuple]:
    x = inputs[0]
    parts = most_parts(_delimiter(attrs), room_for(max_string_bytes) - 1, _maxsplit(attrs))
    for name, value in (max_dims or {}).items():
        if name == DEFAULT_BOUND:  # its parts are bounded by the string bytes already (as TopK by its axis)
            continue
        if value < 0:
            raise InputError(f"--max-dim {name}={value}: give a count of parts, 0 or more")
        parts = min(parts, int(value))
    return [(x.dtype, tuple(x.shape) + (parts,), (len(x.shape),)), (np.dtype(np.int64), tuple(x.shape), ())]


def run_check_split(graph, node) -> str | None:
    out = graph.tensors[node.outputs[0]] if node.outputs and node.outputs[0] else None
    bound = out.shape[-1] if out is not None else 0
    x = graph.tensors[node.inputs[0]]
    if bound >= most_parts(_delimiter(node.attrs), capacity(x.dtype), _maxsplit(node.attrs)):
        return None
    return (f"StringSplit node {node.name!r}: an element splits into more than {bound} parts; the outputs are not "
            f"valid: build with a larger --max-dim {node.name}=N")


@register("StringSplit", since=20, strings=True, output_bound=bound_split, run_check=run_check_split)
def lower_string_split(k):
    x = k.inputs[0]
    out, counts = k.outputs[0], (k.outputs[1] if len(k.outputs) > 1 else None)
    b = k.b
    cap, n = capacity(x.dtype), x.size
    delimiter = _delimiter(k.node.attrs)
    maxsplit = _maxsplit(k.node.attrs)
    delim_ptr = None
    if delimiter:
        delim_ptr = b.bitcast(k.constant_data(np.frombuffer(delimiter, np.uint8)), ks.I8P)
    bound = out.shape[-1] if out is not None else 0

    def walk(i, on_part):
        slot = ks.slot_at(k, x.ptr, i)
        ks.split_parts(k, ks.data(k, slot), ks.clamp_length(k, slot, cap), delim_ptr, len(delimiter), maxsplit, on_part)

    most = k.local(I64, I64(0))
    with k.for_range(n) as i:
        count = k.local(I64, I64(0))
        walk(i, lambda start, length: b.store(b.add(b.load(count), I64(1)), count))
        if counts is not None:
            b.store(b.load(count), b.gep(counts.ptr, [i], inbounds=True))
        b.store(b.select(b.icmp_signed(">", b.load(count), b.load(most)), b.load(count), b.load(most)), most)
    ks.fail(k, b.icmp_signed(">", b.load(most), I64(bound)))
    width = b.select(b.icmp_signed(">", b.load(most), I64(bound)), I64(bound), b.load(most))
    if out is None:
        return
    out_cap = capacity(out.dtype)
    with k.for_range(n) as i:
        row = b.mul(ks.size_t(k, width), i)
        j = k.local(I64, I64(0))
        source = ks.data(k, ks.slot_at(k, x.ptr, i))

        def write(start, length):
            with b.if_then(b.icmp_signed("<", b.load(j), width)):
                dst = ks.slot_at(k, out.ptr, b.add(row, ks.size_t(k, b.load(j))))
                ks.write(k, dst, out_cap, [(b.gep(source, [ks.size_t(k, start)]), length)])
            b.store(b.add(b.load(j), I64(1)), j)
        walk(i, write)
        with ks.loop_while(k, lambda: b.icmp_signed("<", b.load(j), width)):
            ks.set_length(k, ks.slot_at(k, out.ptr, b.add(row, ks.size_t(k, b.load(j)))), I64(0))
            b.store(b.add(b.load(j), I64(1)), j)
    dims = k.dims_out.get(0)
    if dims is not None:
        for d, extent in enumerate([*x.shape, width]):
            b.store(I64(extent) if isinstance(extent, int) else extent, b.gep(dims, [k.index(d)], inbounds=True))
