"""RegexFullMatch's pattern compiled to a DFA and to LLVM code (kernels/regex_dfa.py, docs/REGEX.md): the DFA and
the JIT-compiled matcher against Python's re.fullmatch on generated strings (patterns translated where RE2 and
Python differ), ONNX's three RegexFullMatch cases, UTF-8 and invalid UTF-8, errors for what RE2 rejects, and the
same IR compiled for every target and run under qemu."""
from __future__ import annotations

import ctypes
import random
import re

import pytest
from llvmlite import ir
from modelrun import board_runner

from fluidml_xc.errors import InputError
from fluidml_xc.kernels.regex_dfa import compile_dfa, emit_matcher
from fluidml_xc.target.boards import get_board
from fluidml_xc.target.jit import jit_engine
from fluidml_xc.target.machine import compile_module, data_layout, machine_spec

A = re.ASCII
SPACE = r"[\t\n\f\r ]"  # RE2's \s (Python's ASCII \s adds \v)
CASES = [
    # (RE2 pattern, the same language in Python's re or None for the same text, Python flags)
    (r"www\.[\w.-]+\.\bcom\b", None, A),
    (r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|\Z)", A),
    ("", None, 0),
    (r"a*b+c?", None, 0),
    (r"(?:ab|cd){2,4}e{0,2}", None, 0),
    (r"a{3}|b{2,}|c{1,3}?", None, 0),
    (r"x*?y+?z??(?U)a+b", r"x*y+z?a+b", 0),
    (r"(a|ab)(c|bcd)(d*)", None, 0),
    (r"[^a-c\d]+x", None, A),
    (r"\d{3}-\d{2,4}", None, A),
    (r"\s*\S+\s*", rf"{SPACE}*[^\t\n\f\r ]+{SPACE}*", 0),
    (r"[\d\s_]+\D", r"[0-9\t\n\f\r _]+[^0-9]", 0),
    (r"[[:alpha:]_][[:alnum:]_]*", r"[A-Za-z_][A-Za-z0-9_]*", 0),
    (r"[[:^digit:][:punct:]]+", r"[^0-9]+", 0),
    (r".*", r"[^\n]*", 0),
    (r"(?s).*", r"(?s:.)*", 0),
    (r"a.c|.{2}☺", r"a[^\n]c|[^\n]{2}☺", 0),
    (r"(?s:.)\n.", r"(?s:.)\n[^\n]", 0),
    (r"[\x{263a}-\x{263c}é]+\x41\101\0?", "[\u263a-\u263cé]+AA\x00?", 0),
    (r"\Qa.b*\E+[]a]+[^]b]", r"a\.b\*+[\]a]+[^\]b]", 0),
    (r"^ab$|\Acd\z", r"ab|cd", 0),
    (r"(?m)a$\n^b|x^y", r"a\nb", 0),
    (r"\bfoo\b.*|\B_", r"\bfoo\b[^\n]*|\B_", A),
    (r"a\Bb|a\b b", None, A),
    (r"(?i)hello wörld", None, 0),
    (r"(?i)[k-m]+[^s]", None, 0),
    (r"(?i:ǆ)x|[éÉ]+(?i)Z", r"(?i:ǆ)x|[éÉ]+(?i:Z)", 0),
    (r"(?P<year>\d{4})-(?<m>0[1-9]|1[0-2])", r"(?P<year>[0-9]{4})-(?P<m>0[1-9]|1[0-2])", 0),
]
ALPHABET = "ab01_ .-@\n\t\u212akKsSéÉ☺😀ǅ"
ONNX_CASES = ("export_basic", "export_match_email_domain", "export_match_empty")
INVALID = [b"\xff", b"\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x98", b"ok\xe2\x98",
           b"\xe2\x98\xbaz\xff", b"a\xc3", b"\xc3a"]
UNSUPPORTED = [
    (r"(a)\1", "backreferences"), (r"\k<n>", "backreferences"), ("(?P=n)", "backreferences"),
    ("(?=a)", "lookahead"), ("(?!a)", "negative lookahead"), ("(?<=a)b", "lookbehind"), ("(?<!a)b", "negative lookbehind"),
    ("(?>a)", "atomic"), ("a++", "possessive"), ("a**", "bad repetition"), ("*a", "missing argument"),
    (r"a\Z", r"\z"), ("(?x)a", "flag 'x'"), ("[b-a]", "bad class range"), ("(a", "missing ')'"), ("a)", "unmatched ')'"),
    ("[a", "missing ']'"), ("a{1001}", "limit of 1000"), (r"\p{Greek}", "scripts"), (r"\y", "invalid escape"),
    ("[[:foo:]]", "POSIX"), (r"\xZZ", "hexadecimal"), (r"[ab]*a[ab]{14}", "MAX_DFA_STATES"),
    ("(?:a{100}){100}", "MAX_DFA_STATES"),
]


def distances(dfa) -> list[float]:
    """Per state the fewest bytes to an accepting state (inf: none)."""
    dist = [0.0 if s < dfa.accepting else float("inf") for s in range(dfa.states)]
    changed = True
    while changed:
        changed = False
        for s in range(dfa.states):
            best = 1 + min(dist[t] for t in dfa.table[s].tolist())
            if best < dist[s]:
                dist[s], changed = best, True
    return dist


def walk(dfa, dist, rng: random.Random, limit: int = 30) -> bytes:
    """Bytes along a random path of the DFA through live states, heading for acceptance after `limit` bytes or by
    chance, stopping at an accepting state by chance."""
    out, s = bytearray(), dfa.start
    while not (s < dfa.accepting and (rng.random() < 0.25 or len(out) >= limit)):
        bound = dist[s] if len(out) >= limit or rng.random() < 0.3 else float("inf")
        live = [b for b in range(256) if dist[int(dfa.table[s, dfa.classes[b]])] < bound]
        if not live:
            break
        b = rng.choice(live)
        out.append(b)
        s = int(dfa.table[s, dfa.classes[b]])
    return bytes(out)


def strings(pattern: str, dfa, seed: int) -> list[str]:
    """Random strings over the pattern's characters and ALPHABET, the DFA's accepted walks and their one-character
    edits: a few hundred per pattern."""
    rng = random.Random(seed)
    chars = sorted(set(ALPHABET) | set(pattern))
    out = {"".join(rng.choice(chars) for _ in range(rng.randrange(8))) for _ in range(150)}
    dist = distances(dfa)
    for _ in range(150 if dist[dfa.start] < float("inf") else 0):
        try:
            text = walk(dfa, dist, rng).decode()
        except UnicodeDecodeError:
            continue
        out.add(text)
        at = rng.randrange(len(text) + 1)
        out |= {text[:at] + rng.choice(chars) + text[at:], text[:at] + text[at + 1:],
                text[:at] + rng.choice(chars) + text[at + 1:]}
    return sorted(out)


@pytest.fixture(scope="module")
def compiled():
    """Per case: (DFA, strings, expected) with expected from Python's re."""
    out = []
    for i, (pattern, python, flags) in enumerate(CASES):
        dfa = compile_dfa(pattern)
        texts = strings(pattern, dfa, seed=i)
        want = [re.fullmatch(python if python is not None else pattern, t, flags) is not None for t in texts]
        out.append((dfa, texts, want))
    return out


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] or "empty" for c in CASES])
def test_dfa_matches_python_re(compiled, case):
    dfa, texts, want = compiled[case]
    assert True in want and (False in want or CASES[case][0] == "(?s).*")
    got = [dfa.fullmatch(t.encode()) for t in texts]
    wrong = [(t, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not wrong, f"{CASES[case][0]!r}: {len(wrong)} of {len(texts)} wrong, e.g. (string, re says) {wrong[:5]}"


def jit_matchers(dfas):
    module = ir.Module("regex")
    for i, dfa in enumerate(dfas):
        emit_matcher(module, f"match_{i}", dfa)
    spec = machine_spec(get_board(None))
    engine = jit_engine(str(module), spec)
    kind = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_char_p, ctypes.c_int64)
    return engine, [kind(engine.get_function_address(f"match_{i}")) for i in range(len(dfas))]


def test_jit_matcher_matches_python_re(compiled):
    engine, fns = jit_matchers([dfa for dfa, _, _ in compiled])
    for (pattern, _, _), fn, (_, texts, want) in zip(CASES, fns, compiled):
        got = [fn(t.encode(), len(t.encode())) for t in texts]
        wrong = [(t, w) for t, g, w in zip(texts, got, want) if g != w]
        assert not wrong, f"{pattern!r}: {wrong[:5]}"
    del engine


def test_onnx_cases(monkeypatch):
    """ONNX's test_regex_full_match_* cases, their patterns and strings read from onnx's case definitions."""
    from onnx.backend.test.case.node import regex_full_match

    seen = []
    monkeypatch.setattr(regex_full_match, "expect",
                        lambda node, inputs, outputs, name: seen.append((name, node, inputs[0], outputs[0])))
    for name in ONNX_CASES:
        getattr(regex_full_match.RegexFullMatch, name)()
    assert [s[0] for s in seen] == ["test_regex_full_match_basic", "test_regex_full_match_email_domain",
                                    "test_regex_full_match_empty"]
    for name, node, x, y in seen:
        (pattern,) = [a.s.decode() for a in node.attribute if a.name == "pattern"]
        dfa = compile_dfa(pattern)
        _, (fn,) = jit_matchers([dfa])
        got = [dfa.fullmatch(s.encode()) for s in x.ravel()]
        assert got == y.ravel().tolist(), name
        assert [fn(s.encode(), len(s.encode())) for s in x.ravel()] == got, name


def test_code_points_and_classes_without_an_oracle():
    """Unicode categories and case folding Python's re cannot check (no \\p; RE2 folds simply, not fully)."""
    cases = [(r"\pL+", "Ωé", True), (r"\pL+", "a1", False), (r"\p{Lu}\p{Ll}", "Éa", True), (r"\PL", "1", True),
             (r"\p{^L}", "a", False), (r"\pN", "٣", True), (r"\d", "٣", False), (r"\w", "é", False),
             (r"(?i)ǆ", "ǅ", True), (r"(?i)straße", "STRASSE", False), (r"(?i)ß", "ẞ", True),
             (r"(?i)k", "\u212a", True), (r"(?i)[^k]", "\u212a", False), (r"(?i)\W", "\u212a", False),
             (r"(?i)s", "ſ", True), (r"(?i)i", "ı", False), (r"\p{Any}{2}", "😀\n", True), (r".", "😀", True),
             (r"..", "😀", False), (r"[^a]", "😀", True), (r"\x{1F600}", "😀", True), (r"[😀-😂]{2}", "😁😂", True)]
    wrong = [(p, s, want) for p, s, want in cases if compile_dfa(p).fullmatch(s.encode()) != want]
    assert not wrong


def test_invalid_utf8_never_matches():
    """An invalid byte sequence (stray continuation, overlong, surrogate, past U+10FFFF, truncated) is no code point:
    `.` and negated classes never match it; only \\C reads bytes."""
    patterns = [r".*", r"(?s).*", r"[^a]*", r"\W*", r"\D*", r"(?i)[^k]*", r"\PL*", r"ok.*"]
    valid = "☺ 😀".encode()
    dfas = [compile_dfa(p) for p in patterns]
    engine, fns = jit_matchers(dfas)
    for p, dfa, fn in zip(patterns, dfas, fns):
        assert [dfa.fullmatch(s) for s in INVALID] == [False] * len(INVALID), p
        assert [fn(s, len(s)) for s in INVALID] == [False] * len(INVALID), p
        text = b"ok" + valid if p.startswith("ok") else valid
        assert dfa.fullmatch(text) and fn(text, len(text)), p
    any_byte = compile_dfa(r"a\C+")
    assert [any_byte.fullmatch(s) for s in (b"a\xff\x80", b"a", b"b\xff")] == [True, False, False]
    del engine


@pytest.mark.parametrize("pattern,fragment", UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
def test_unsupported_syntax_is_a_one_line_error(pattern, fragment):
    with pytest.raises(InputError) as info:
        compile_dfa(pattern, where="node 'rx' (RegexFullMatch)")
    message = str(info.value)
    assert fragment in message and "\n" not in message and message.startswith("node 'rx' (RegexFullMatch)"), message


def test_minimal_dfa_and_smallest_state_type():
    """[ab]*a[ab]{8}: its minimal DFA remembers the last 9 of a/b (2^9 states) plus the dead state, over 3 byte
    classes (a, b, any other byte); its entries (states premultiplied by the class count, up to 1536) need i16,
    a DFA whose states x classes stay below 256 i8."""
    big = compile_dfa(r"[ab]*a[ab]{8}")
    assert big.table.shape == (2 ** 9 + 1, 3) and big.dead == 2 ** 9
    module = ir.Module("t")
    emit_matcher(module, "m", big)
    assert f"[{big.table.size} x i16]" in str(module)
    small = compile_dfa("abc")
    assert small.table.shape == (5, 4)  # start, a, ab, abc, dead; classes a, b, c, other
    module = ir.Module("t")
    emit_matcher(module, "m", small)
    assert f"[{small.table.size} x i8]" in str(module)


def matcher_ir(pattern: str) -> str:
    module = ir.Module("regex")
    emit_matcher(module, "fxc_regex_match", compile_dfa(pattern))
    return str(module)


TARGET_BOARDS = ("x86_64", "rpi4", "qemu-armv7", "qemu-riscv64")
PATTERN = r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)|(?i)ǆ+.{2}"


def test_emitted_code_is_target_independent():
    """The IR takes no target: the same text twice, no triple or data layout, and it compiles for every target."""
    text = matcher_ir(PATTERN)
    assert text == matcher_ir(PATTERN)
    assert 'target triple = "unknown-unknown-unknown"' in text and 'target datalayout = ""' in text
    for board in TARGET_BOARDS:
        spec = machine_spec(get_board(board))
        obj = compile_module(targeted(text, spec), spec)
        assert obj[:4] == b"\x7fELF", board


def targeted(text: str, spec) -> str:
    return (text.replace('target triple = "unknown-unknown-unknown"', f'target triple = "{spec.triple}"')
            .replace('target datalayout = ""', f'target datalayout = "{data_layout(spec)}"'))


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["rpi4", "qemu-armv7", "qemu-riscv64"])
def test_matcher_runs_on_every_target(board, tmp_path):
    """The same IR compiled for a foreign board, linked with a C harness and run under its emulator, agrees with
    the DFA on valid and invalid UTF-8."""
    from pathlib import Path

    from fluidml_xc.emit.link import RUNTIME_CPU, compile_c_program

    runner = board_runner(board)
    resolved = get_board(board)
    spec = machine_spec(resolved)
    dfa = compile_dfa(PATTERN)
    (tmp_path / "match.o").write_bytes(compile_module(targeted(matcher_ir(PATTERN), spec), spec))
    texts = [t.encode() for t in strings(PATTERN, dfa, seed=7)] + INVALID
    (tmp_path / "lines.txt").write_text("".join(t.hex() + "\n" for t in texts))
    exe = compile_c_program(resolved.target, RUNTIME_CPU, [Path(__file__).parent / "c" / "regex_lines.c"], [],
                            [tmp_path / "match.o"], tmp_path / "regex_lines")
    proc = runner.exec([exe, tmp_path / "lines.txt"])
    assert proc.returncode == 0, proc.stderr
    want = "".join("1" if dfa.fullmatch(t) else "0" for t in texts)
    assert proc.stdout.strip() == want and "1" in want


def re2_fullmatch(pattern: str, texts: list[str], raw: list[bytes]) -> list[bool]:
    """RE2's own answers, through ONNX Runtime's RegexFullMatch kernel: `texts` as str, then `raw` bytes (invalid
    UTF-8: a numpy bytes array reaches the kernel unchanged; none may end in a NUL, numpy drops those)."""
    import numpy as np
    import onnxruntime
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern)], "regex",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [*session.run(None, {"x": np.array(texts, dtype=object)})[0].tolist(),
            *session.run(None, {"x": np.array(raw, dtype="S")})[0].tolist()]


ORACLE_FREE = [r"\pL+\PL?", r"\p{Lu}\p{Ll}|\pN", r"(?i)straße|ß|[^k]\W", r"(?i)i|ǆ", r"[😀-😂]{2}|\x{1F600}.."]
RE2_LENIENT = (b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80")
"""RE2's `.` and negated classes take any 3- or 4-byte lead and continuation bytes for a character (surrogates,
overlong forms, past U+10FFFF); here they are invalid UTF-8 and never match (docs/REGEX.md)."""


@pytest.mark.parametrize("pattern", [c[0] for c in CASES] + ORACLE_FREE)
def test_dfa_matches_re2(compiled, pattern):
    """The DFA against RE2 itself (ONNX Runtime's kernel) on the generated strings and on invalid UTF-8."""
    known = [c[0] for c in CASES]
    dfa, texts, _ = compiled[known.index(pattern)] if pattern in known else (compile_dfa(pattern), None, None)
    texts = texts if texts is not None else strings(pattern, dfa, seed=11)
    raw = [t for t in INVALID if t not in RE2_LENIENT]
    want = re2_fullmatch(pattern, texts, raw)
    wrong = [(t, w) for t, w in zip([t.encode() for t in texts] + raw, want) if dfa.fullmatch(t) != w]
    assert True in want and not wrong, f"{pattern!r}: {len(wrong)} of {len(want)} differ from RE2: {wrong[:5]}"


def regex_model(pattern: str, shape=(2, 3)):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern, name="rx")], "regex",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


@pytest.mark.parametrize("pattern,fragment", [(r"(a)\1", "backreferences (\\1) are not supported by RE2"),
                                              (r"[ab]*a[ab]{14}", "more than 10000 states (MAX_DFA_STATES)")])
def test_build_refuses_a_bad_pattern_in_one_line(tmp_path, pattern, fragment):
    """`fluidml-xc build`: one line naming the node and the problem, exit status 2, no artifact."""
    import onnx
    from modelrun import cli, one_line_error

    onnx.save(regex_model(pattern), tmp_path / "m.onnx")
    proc = cli("build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"))
    line = one_line_error(proc)
    assert proc.returncode == 2 and "node 'rx' (RegexFullMatch)" in line and fragment in line, line
    assert not (tmp_path / "out").exists()


def test_matcher_ir_is_the_same_under_any_hash_seed():
    """Reproducible builds: the IR of a pattern with sets of states, classes and assertions does not depend on
    Python's hash seed."""
    import hashlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import hashlib, sys; sys.path.insert(0, sys.argv[1]); from test_regex_dfa import matcher_ir, PATTERN; "
            "print(hashlib.sha256(matcher_ir(PATTERN).encode()).hexdigest())")
    here = Path(__file__).parent
    digests = {subprocess.run([sys.executable, "-c", code, str(here)], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed,
                                   "PYTHONPATH": str(here.parent / "toolkit")}).stdout.strip() for seed in ("1", "2")}
    assert digests == {hashlib.sha256(matcher_ir(PATTERN).encode()).hexdigest()}


def test_regex_full_match_op_matches_onnxruntime():
    """The op over string tensors (ops/regex_full_match.py): a [2, 3] tensor through the JIT, against ONNX Runtime."""
    import numpy as np
    import onnxruntime
    from modelrun import jit_run

    model = regex_model(r"(?i)[\w.]+@(gmail|yahoo)\.COM|\d{2,}|é+")
    x = np.array([["me@Gmail.com", "a@hotmail.com", "12"], ["", "ééÉ", "x.y@YAHOO.com"]], dtype=object)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    assert want.tolist() == [[True, False, True], [False, True, True]]
    got = jit_run(model, {"x": x})["y"]
    assert got.dtype == np.bool_ and got.tolist() == want.tolist()
