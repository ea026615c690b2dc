"""Einsum equations: the labels of each operand and of the output (implicit mode and '...' spelled out), shared
by the Einsum lowering (ops/einsum.py) and the pass that turns matrix-product equations into MatMul."""
from __future__ import annotations

from .errors import InputError

_ELLIPSIS_LABELS = "".join(chr(c) for c in range(0x100, 0x140))  # labels no equation spells


def parse_equation(equation: str, ranks: list[int], name: str) -> tuple[list[str], str]:
    """(one label string per operand, the output's labels) of an Einsum equation for operands of these ranks;
    '...' becomes labels no equation spells. InputError naming node NAME when the equation does not fit."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise InputError(f"node {name!r} (Einsum): equation {equation!r} names {len(terms)} operands, got {len(ranks)}")
    ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            ell = max(ell, r - (len(t) - 3))
    ell_labels = _ELLIPSIS_LABELS[:ell]
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - (len(t) - 3)
            t = t.replace("...", ell_labels[ell - n:] if n else "")
        if len(t) != r:
            raise InputError(f"node {name!r} (Einsum): term {t!r} does not match an operand of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell_labels)
    else:
        counts: dict[str, int] = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell_labels + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell_labels))
    return out_terms, out
