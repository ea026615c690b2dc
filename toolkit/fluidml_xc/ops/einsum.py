"""Einsum for static equations, lowered as one `generic` reduction over the union of the labels.

The domain is the output labels (in output order) followed by the other labels (reduced, summed);
each operand accesses the domain through its labels' strides (a label repeated within one operand
is a diagonal: its strides add up), the body is the product of the operands' elements. Implicit
mode (no '->') outputs the labels used exactly once, alphabetically, after any ellipsis dims;
'...' stands for the same broadcast dims in every operand (right-aligned, size 1 broadcasts).
A label over a dim that varies at run time loops to its run-time extent (the split planned at the capacity).
"""
from __future__ import annotations

from ..kernels.scalar import const
from ..einsum_equation import parse_equation
from ..opspec import register


@register("Einsum", lowp_native=True, heavy=True, runtime_extents=True)
def lower_einsum(k):
    ins = [op for op in k.inputs if op is not None]
    out = k.outputs[0]
    dt = out.dtype
    terms, out_labels = parse_equation(str(k.attr("equation")), [op.rank for op in ins], k.node.name)
    if not out.size:
        return
    labels = list(out_labels)
    for t in terms:
        for c in t:
            if c not in labels:
                labels.append(c)
    pos = {c: i for i, c in enumerate(labels)}
    extent = {c: 1 for c in labels}
    for t, op in zip(terms, ins):
        for c, n in zip(t, op.shape):
            extent[c] = max(extent[c], n)
    if any(extent[c] == 0 for c in labels):
        k.generic(out.shape, [out.identity_access()], [], lambda v, i: [const(dt, 0)])
        return
    domain = [extent[c] for c in labels]
    capacity = None
    if k.dynamic:  # a label's run-time extent from an operand whose dim varies there (broadcast 1s never vary)
        run = dict(extent)
        for t, op in [*zip(terms, ins), (out_labels, out)]:
            for j, c in enumerate(t):
                if op.varies(j):
                    run[c] = k.extent(op, j)
        capacity, domain = domain, [run[c] for c in labels]
    nd = len(domain)
    accesses = [op.access([pos[c] for c in t], nd) for t, op in zip(terms, ins)]
    out_acc = out.access(list(range(len(out_labels))), nd)
    reduce_dims = list(range(len(out_labels), nd))

    def body(values, idx):
        acc = values[0]
        for v in values[1:]:
            acc = k.s.mul(dt, acc, v)
        return [acc]
    if not ins:
        return
    if capacity is not None:
        k.generic(domain, [out_acc], accesses, body, reduce_dims, [const(dt, 0)] if reduce_dims else None,
                  capacity=capacity)
    elif reduce_dims:
        k.generic(domain, [out_acc], accesses, body, reduce_dims, [const(dt, 0)])
    else:
        k.generic(domain, [out_acc], accesses, body)
