"""RegexFullMatch (opset 20): the `pattern` attribute compiled at build time to a minimized DFA and a table-walk
function (kernels/regex_dfa.py, docs/REGEX.md), called on each string element's bytes; the output is bool."""
from __future__ import annotations

from llvmlite import ir

from ..errors import InputError
from ..kernels import strings as ks
from ..kernels.regex_dfa import compile_dfa, emit_matcher
from ..opspec import register
from ..strings import capacity


@register("RegexFullMatch", since=20, strings=True)
def lower_regex_full_match(k):
    x, out = k.inputs[0], k.outputs[0]
    where = f"node {k.node.name!r} (RegexFullMatch)"
    pattern = k.attr("pattern", None)
    if pattern is None:
        raise InputError(f"{where}: the pattern attribute is missing: give the RE2 pattern to match")
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8")
    match = emit_matcher(k.module, k.module.get_unique_name("regex_full_match"), compile_dfa(str(pattern), where),
                         linkage="internal")
    cap = capacity(x.dtype)

    def body(o, ins):
        slot = ks.slot_at(k, x.ptr, ins[0])
        hit = k.b.call(match, [ks.data(k, slot), ks.clamp_length(k, slot, cap)])
        k.b.store(k.b.zext(hit, ir.IntType(8)), k.b.gep(out.ptr, [o], inbounds=True))
    ks.elements(k, out, [x], body)
