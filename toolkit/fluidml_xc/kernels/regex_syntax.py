"""RE2 syntax (RegexFullMatch's `pattern`) parsed into a small tree of code point sets, concatenations,
alternations, repetitions and empty-width assertions; kernels/regex_dfa.py compiles it to a byte automaton.

Semantics follow RE2 (docs/REGEX.md): `.` and classes match whole code points (never a surrogate), `\\d \\w \\s \\b`
are ASCII, `(?i)` folds with Unicode simple case folding (classes folded before they are negated), `$` without
`(?m)` is the end of the text. What RE2 rejects (backreferences, lookaround, ...) is an InputError naming it.
"""
from __future__ import annotations

import bisect
import unicodedata
from dataclasses import dataclass
from functools import cache

from ..errors import InputError

MAX_CODE = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
MAX_REPEAT = 1000
"""RE2's largest repetition count."""
MAX_DEPTH = 200
"""Deepest nesting of groups and repetitions read (the parser recurses)."""
CASED_BELOW = 0x1F000
"""No code point at or above this has a case mapping (Unicode 15: the last cased letters are Adlam's)."""

Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Chars:
    """One code point out of `ranges` (sorted, disjoint, no surrogates), as its UTF-8 bytes."""
    ranges: Ranges


@dataclass(frozen=True)
class AnyByte:
    """`\\C`: one byte, whatever it is."""


@dataclass(frozen=True)
class Concat:
    items: tuple


@dataclass(frozen=True)
class Alt:
    items: tuple


@dataclass(frozen=True)
class Repeat:
    item: object
    min: int
    max: int | None
    """None: unbounded."""


@dataclass(frozen=True)
class Assert:
    """An empty-width assertion: one of ASSERTIONS."""
    kind: str


@dataclass(frozen=True)
class Quoted:
    """`\\Q...\\E` while it is parsed: its characters, each its own atom."""
    items: tuple


ASSERTIONS = ("begin_text", "end_text", "begin_line", "end_line", "word_boundary", "not_word_boundary")


def normalize(ranges) -> Ranges:
    """Sorted, merged, surrogates removed."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    cut = []
    for lo, hi in out:
        if lo < SURROGATES[0] and hi >= SURROGATES[0]:
            cut.append((lo, SURROGATES[0] - 1))
            lo = SURROGATES[0]
        if lo <= SURROGATES[1] and hi > SURROGATES[1]:
            lo = max(lo, SURROGATES[1] + 1)
        if not (SURROGATES[0] <= lo and hi <= SURROGATES[1]):
            cut.append((lo, hi))
    return tuple(cut)


def negate(ranges: Ranges) -> Ranges:
    out, at = [], 0
    for lo, hi in ranges:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX_CODE:
        out.append((at, MAX_CODE))
    return normalize(out)


@cache
def _fold_orbits() -> tuple[tuple[int, ...], dict[int, tuple[int, ...]]]:
    """Every code point with a simple case folding, sorted, and each one's orbit (the code points it matches under
    (?i)); from Python's case mappings (full mappings to several code points are not simple foldings)."""
    keys: dict[str, set[int]] = {}
    for c in range(CASED_BELOW):
        ch = chr(c)
        key = ch.casefold()
        if len(key) != 1:
            key = ch.lower() if len(ch.lower()) == 1 else ch
        if key != ch or ch.upper() != ch:
            keys.setdefault(key, {ord(key)}).add(c)
    orbit = {c: tuple(sorted(members)) for members in keys.values() if len(members) > 1 for c in members}
    return tuple(sorted(orbit)), orbit


def fold(ranges: Ranges) -> Ranges:
    cased, orbit = _fold_orbits()
    extra = []
    for lo, hi in ranges:
        for i in range(bisect.bisect_left(cased, lo), bisect.bisect_right(cased, hi)):
            extra += [(c, c) for c in orbit[cased[i]]]
    return normalize([*ranges, *extra])


WORD = ((ord("0"), ord("9")), (ord("A"), ord("Z")), (ord("_"), ord("_")), (ord("a"), ord("z")))
PERL = {"d": ((ord("0"), ord("9")),), "w": WORD,
        "s": ((9, 10), (12, 13), (32, 32))}
POSIX = {
    "alnum": ((48, 57), (65, 90), (97, 122)), "alpha": ((65, 90), (97, 122)), "ascii": ((0, 127),),
    "blank": ((9, 9), (32, 32)), "cntrl": ((0, 31), (127, 127)), "digit": ((48, 57),), "graph": ((33, 126),),
    "lower": ((97, 122),), "print": ((32, 126),), "punct": ((33, 47), (58, 64), (91, 96), (123, 126)),
    "space": ((9, 13), (32, 32)), "upper": ((65, 90),), "word": WORD, "xdigit": ((48, 57), (65, 70), (97, 102)),
}
CATEGORIES = ("Cc", "Cf", "Co", "Cs", "Ll", "Lm", "Lo", "Lt", "Lu", "Mc", "Me", "Mn", "Nd", "Nl", "No", "Pc", "Pd", "Pe",
              "Pf", "Pi", "Po", "Ps", "Sc", "Sk", "Sm", "So", "Zl", "Zp", "Zs")
UNSUPPORTED_GROUPS = {"=": "lookahead (?=...)", "!": "negative lookahead (?!...)", "<=": "lookbehind (?<=...)",
                      "<!": "negative lookbehind (?<!...)", ">": "atomic groups (?>...)", "#": "comments (?#...)",
                      "(": "conditionals (?(...)...)", "P=": "backreferences (?P=name)", "P>": "recursion (?P>name)",
                      "R": "recursion (?R)", "|": "branch reset (?|...)"}
ESCAPES = {"a": 7, "f": 12, "t": 9, "n": 10, "r": 13, "v": 11}


@cache
def category(name: str) -> Ranges:
    """A Unicode general category (one letter: all its subcategories) from Python's unicodedata."""
    if name == "Any":
        return ((0, MAX_CODE),)
    names = {n for n in CATEGORIES if n[0] == name} if len(name) == 1 else {name} & set(CATEGORIES)
    if not names:
        return ()
    out, start = [], None
    for c in range(MAX_CODE + 2):
        inside = c <= MAX_CODE and unicodedata.category(chr(c)) in names
        if inside and start is None:
            start = c
        elif not inside and start is not None:
            out.append((start, c - 1))
            start = None
    return normalize(out)


@dataclass
class Flags:
    fold: bool = False
    dot_nl: bool = False
    multiline: bool = False


class Parser:
    """Recursive descent over the pattern's code points; `parse()` gives the tree."""

    def __init__(self, pattern: str, where: str = "RegexFullMatch"):
        self.p, self.i, self.where, self.flags, self.depth = pattern, 0, where, Flags(), 0

    def error(self, what: str) -> InputError:
        return InputError(f"{self.where}: pattern {self.p!r}: {what}")

    def peek(self, text: str) -> bool:
        return self.p.startswith(text, self.i)

    def take(self) -> str:
        if self.i >= len(self.p):
            raise self.error("ends too early (a trailing '\\' or an unclosed group or class)")
        self.i += 1
        return self.p[self.i - 1]

    def parse(self):
        tree = self.alternation()
        if self.i < len(self.p):
            raise self.error(f"unmatched ')' at offset {self.i}")
        return tree

    def alternation(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nests groups deeper than {MAX_DEPTH}")
        items = [self.concatenation()]
        while self.peek("|"):
            self.i += 1
            items.append(self.concatenation())
        self.depth -= 1
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def concatenation(self):
        items: list = []
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            atom = self.atom()
            if atom is None:  # a flag group: no atom
                continue
            if isinstance(atom, Quoted):  # \\Q...\\E: a repetition after it repeats its last character
                if not atom.items:
                    continue
                items += atom.items[:-1]
                atom = atom.items[-1]
            items.append(self.repeats(atom))
        return items[0] if len(items) == 1 else Concat(tuple(items))

    def repeats(self, atom):
        start = self.i
        bounds = self.quantifier()
        if bounds is None:
            return atom
        if self.peek("?"):
            self.i += 1  # lazy: the same language for a full match
        if self.peek("+"):
            raise self.error(f"possessive quantifiers ({self.p[start:self.i + 1]}) are not supported by RE2")
        if self.quantifier_at(self.i):
            raise self.error(f"bad repetition operator at offset {self.i}: RE2 does not stack repetitions "
                             "(a**); group the inner one: (?:a*)*")
        return Repeat(atom, *bounds)

    def quantifier(self) -> tuple[int, int | None] | None:
        if self.i >= len(self.p):
            return None
        c = self.p[self.i]
        if c in "*+?":
            self.i += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        if c == "{":
            end = self.p.find("}", self.i)
            body = self.p[self.i + 1:end] if end > 0 else ""
            lo, comma, hi = body.partition(",")
            if not lo.isdigit() or not (hi.isdigit() or hi == "") or not lo.isascii() or not hi.isascii():
                return None  # not a repetition: `{` is a literal
            lo_n, hi_n = int(lo), (int(hi) if hi else None) if comma else int(lo)
            for n in (lo_n, hi_n):
                if n is not None and n > MAX_REPEAT:
                    raise self.error(f"repetition count {n} exceeds RE2's limit of {MAX_REPEAT}")
            if hi_n is not None and hi_n < lo_n:
                raise self.error(f"bad repetition {{{body}}}: the maximum is below the minimum")
            self.i = end + 1
            return lo_n, hi_n
        return None

    def atom(self):
        c = self.take()
        if c in "*+?" or c == "{" and self.quantifier_at(self.i - 1):
            raise self.error(f"missing argument to repetition operator {c!r} at offset {self.i - 1}")
        if c == "(":
            return self.group()
        if c == "[":
            return Chars(self.bracket())
        if c == ".":
            return Chars(negate(()) if self.flags.dot_nl else negate(((10, 10),)))
        if c == "^":
            return Assert("begin_line" if self.flags.multiline else "begin_text")
        if c == "$":
            return Assert("end_line" if self.flags.multiline else "end_text")
        if c == "\\":
            return self.escape()
        return self.chars(((ord(c), ord(c)),))

    def quantifier_at(self, at: int) -> bool:
        saved = self.i
        self.i = at
        try:
            return self.quantifier() is not None
        finally:
            self.i = saved

    def chars(self, ranges, negated: bool = False) -> Chars:
        ranges = normalize(ranges)
        if self.flags.fold:
            ranges = fold(ranges)
        return Chars(negate(ranges) if negated else ranges)

    def group(self):
        saved = Flags(**vars(self.flags))
        if self.peek("?"):
            self.i += 1
            for text, what in UNSUPPORTED_GROUPS.items():
                if self.peek(text):
                    raise self.error(f"{what} is not supported by RE2 syntax")
            if self.peek("P<") or self.peek("<"):
                self.i = self.p.find(">", self.i)
                if self.i < 0:
                    raise self.error("unclosed group name (?P<name>")
                self.i += 1
            elif not self.peek(":"):
                if self.set_flags():  # (?flags): for the rest of the enclosing group
                    return None
            else:
                self.i += 1
        inner = self.alternation()
        if not self.peek(")"):
            raise self.error("missing ')': a group is not closed")
        self.i += 1
        self.flags = saved
        return inner

    def set_flags(self) -> bool:
        """Reads `flags)` (True) or `flags:` (False, the group follows) after `(?`."""
        on = True
        while True:
            c = self.take()
            if c in ":)":
                if c == ")" and self.p[self.i - 2] in "?-":
                    raise self.error("empty or dangling flag group (?) or (?-)")
                return c == ")"
            if c == "-" and on:
                on = False
            elif c in "imsU":
                name = {"i": "fold", "m": "multiline", "s": "dot_nl"}.get(c)
                if name:
                    setattr(self.flags, name, on)
            else:
                raise self.error(f"flag {c!r} is not supported by RE2 (flags: i, m, s, U)")

    def escape(self):
        c = self.take()
        simple = {"A": "begin_text", "z": "end_text", "b": "word_boundary", "B": "not_word_boundary"}
        if c in simple:
            return Assert(simple[c])
        if c == "Z":
            raise self.error("\\Z is not supported by RE2; use \\z (or $) for the end of the text")
        if c == "C":
            return AnyByte()
        if c == "Q":
            end = self.p.find("\\E", self.i)
            text = self.p[self.i:] if end < 0 else self.p[self.i:end]
            self.i = len(self.p) if end < 0 else end + 2
            return Quoted(tuple(self.chars(((ord(t), ord(t)),)) for t in text))
        self.i -= 1
        member = self.class_escape()
        if isinstance(member, int):
            return self.chars(((member, member),))
        return Chars(member)

    def class_escape(self) -> int | Ranges:
        """After a `\\`: one code point, or a Perl or Unicode class (case-folded under (?i), then negated)."""
        c = self.take()
        if c.lower() in PERL or c in "pP":
            negated, ranges = (c.isupper(), PERL[c.lower()]) if c.lower() in PERL else self.unicode_class(c == "P")
            ranges = normalize(ranges)
            if self.flags.fold:
                ranges = fold(ranges)
            return negate(ranges) if negated else ranges
        return self.escaped_code(c)

    def unicode_class(self, negated: bool) -> tuple[bool, Ranges]:
        if self.peek("{"):
            end = self.p.find("}", self.i)
            if end < 0:
                raise self.error("unclosed \\p{...}")
            name, self.i = self.p[self.i + 1:end], end + 1
        else:
            name = self.take()
        if name.startswith("^"):
            negated, name = not negated, name[1:]
        ranges = category(name)
        if not ranges:
            raise self.error(f"\\p{{{name}}}: only Unicode general categories (\\pL, \\p{{Lu}}, ...) and Any are "
                             "supported, not scripts; use a code point range like [\\x{370}-\\x{3FF}]")
        return negated, ranges

    def escaped_code(self, c: str) -> int:
        if c in ESCAPES:
            return ESCAPES[c]
        if c == "x":
            return self.hex_code()
        if c in "01234567" and (c == "0" or self.i < len(self.p) and self.p[self.i] in "01234567"):
            digits = c
            while len(digits) < 3 and self.i < len(self.p) and self.p[self.i] in "01234567":
                digits += self.take()
            return int(digits, 8)
        if c.isdigit() or c == "k" and self.peek("<"):
            raise self.error(f"backreferences (\\{c}) are not supported by RE2 syntax")
        if c.isascii() and not c.isalnum():
            return ord(c)
        raise self.error(f"invalid escape sequence \\{c}")

    def hex_code(self) -> int:
        if self.peek("{"):
            end = self.p.find("}", self.i)
            if end < 0:
                raise self.error("unclosed \\x{...}")
            text, self.i = self.p[self.i + 1:end], end + 1
        else:
            text, self.i = self.p[self.i:self.i + 2], self.i + 2
            if len(text) != 2:
                raise self.error(f"invalid hexadecimal escape \\x{text}: two hex digits or \\x{{...}}")
        if not text or any(t not in "0123456789abcdefABCDEF" for t in text) or int(text, 16) > MAX_CODE:
            raise self.error(f"invalid hexadecimal escape \\x{text}")
        return int(text, 16)

    def bracket(self) -> Ranges:
        """A bracketed class after `[`: its code points, case-folded, then negated for `[^`."""
        negated = self.peek("^")
        self.i += negated
        items: list[tuple[int, int]] = []
        first = True
        while first or not self.peek("]"):
            if self.i >= len(self.p):
                raise self.error("missing ']': a character class is not closed")
            first = False
            if self.peek("[:"):
                items += self.posix()
                continue
            lo = self.class_member()
            if isinstance(lo, tuple):
                items += lo
                continue
            if self.peek("-") and not self.p.startswith("-]", self.i):
                self.i += 1
                hi = self.class_member()
                if isinstance(hi, tuple):
                    raise self.error("a class range ends in a class (like [a-\\d])")
                if hi < lo:
                    raise self.error(f"bad class range {chr(lo)}-{chr(hi)}: its end is before its start")
                items.append((lo, hi))
            else:
                items.append((lo, lo))
        self.i += 1
        return self.chars(items, negated).ranges

    def class_member(self) -> int | Ranges:
        c = self.take()
        if c != "\\":
            return ord(c)
        if self.peek("b"):
            raise self.error("\\b (a word boundary) cannot be in a character class")
        return self.class_escape()

    def posix(self) -> Ranges:
        end = self.p.find(":]", self.i + 2)
        name = self.p[self.i + 2:end] if end > 0 else ""
        negated = name.startswith("^")
        if name.lstrip("^") not in POSIX:
            raise self.error(f"unknown POSIX class [:{name}:] (one of {', '.join(POSIX)})")
        self.i = end + 2
        ranges = normalize(POSIX[name.lstrip("^")])
        if self.flags.fold:
            ranges = fold(ranges)
        return negate(ranges) if negated else ranges


def parse(pattern: str, where: str = "RegexFullMatch"):
    """The tree of an RE2 pattern; an InputError naming what RE2 (or this compiler) does not support."""
    return Parser(pattern, where).parse()
