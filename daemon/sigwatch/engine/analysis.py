"""What a step's regex needs from the raw bytes of a line, derived from the regex itself.

Signatures are ``regex`` patterns run on *normalised text* (decoded, ANSI codes and NULs removed,
split at ``\\r``, launcher prefix cut). The prefilter works on *raw bytes* of whole chunks. For
each step this module derives two things that hold for every line on which the step matches:

``factors``
    required literals in conjunctive form: every factor is a set of alternatives of which at
    least one occurs in the line (``(text, caseless)`` pairs). One factor is picked as the
    step's *anchor*: the one expected to be rarest in training logs.
``relaxed``
    a bytes regex that matches the raw line whenever the step matches its text: anchors and
    lookarounds removed, possessive and atomic groups made plain, every character turned into
    the set of byte strings (1 to 4 bytes) it can come from, never crossing a newline.

Both are over-approximations, so using them to skip lines never loses a detection; a candidate
is always confirmed by the real ``regex`` on the normalised text. A pattern whose syntax the
standard library parser would read differently from ``regex`` (POSIX classes, fuzzy matching,
``\\p{..}``, backreferences, verbose mode) gets neither, and its step runs on every line.
"""

from __future__ import annotations

import re
import re._constants as sre_c
import re._parser as sre_parse
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["CASE_VARIANTS", "StepFilter", "analyze", "backtrack_risk", "estimate"]

MIN_ANCHOR_CHARS = 3
# An anchor expected more often than this (per byte of typical training log) is "weak": its
# hits are confirmed by the relaxed regex in C before any Python work is done for the line.
WEAK_ANCHOR_RATE = 1 / 50_000

# Non-ASCII characters that ``regex`` (VERSION0, simple case folding) matches caselessly with
# an ASCII letter. Checked against ``regex`` by tests/unit/test_prefilter.py.
CASE_VARIANTS: dict[str, bytes] = {
    "i": "\u0130".encode(),  # LATIN CAPITAL LETTER I WITH DOT ABOVE
    "k": "\u212a".encode(),  # KELVIN SIGN
    "s": "\u017f".encode(),  # LATIN SMALL LETTER LONG S
}

_NL = 0x0A
_ALL_ASCII = frozenset(range(128)) - {_NL}
_DIGITS = frozenset(b"0123456789")
_WORD = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_SPACE = frozenset(b" \t\r\x0b\x0c\x1c\x1d\x1e\x1f")

# Syntax that ``regex`` understands and the stdlib parser would silently read otherwise.
_UNSAFE = re.compile(
    r"\\[pPXmMGKLNhH]"          # properties, graphemes, word edges, \G, \K, named lists
    r"|\[:\^?[A-Za-z]+:\]"      # POSIX classes
    r"|\(\?[|&R(]|\(\?\d"       # branch reset, subroutines, recursion, conditionals
    r"|\(\?[a-zA-Z]*[xVrfwbep]" # verbose, versions, reverse, fuzzy-best, word, ...
    r"|\(\?P=|\\[1-9]|\\g<"     # backreferences
)
_REPEAT_BRACE = re.compile(r"\{\d*(?:,\d*)?\}")


@dataclass(frozen=True, slots=True)
class StepFilter:
    """What the prefilter knows about one step."""

    anchor: tuple[tuple[str, bool], ...]   # alternatives (literal, caseless); () = none usable
    anchor_rate: float                     # expected hits per byte of typical log
    relaxed: bytes | None                  # bytes regex source; None = unanalysable
    relaxed_lower: bytes | None = None     # the same for ASCII-lowercased bytes

    @property
    def weak(self) -> bool:
        return self.anchor_rate > WEAK_ANCHOR_RATE

    @property
    def led_by_literal(self) -> bool:
        """Whether a literal leads the relaxed regex (``re`` then finds it with memchr; else the
        prefilter gates it on the anchor's literals and tries it at every byte of their lines)."""
        return self.relaxed_lower is not None and re.match(rb"[a-z0-9_]{2}",
                                                           self.relaxed_lower) is not None


# --- reference sample for rarity ----------------------------------------------------------

@lru_cache(maxsize=1)
def _sample() -> tuple[bytes, bytes]:
    path = Path(__file__).with_name("reference.log")
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    return data, data.lower()


@lru_cache(maxsize=65536)
def estimate(literal: str, caseless: bool) -> float:
    """Expected occurrences per byte of a typical training log (smoothed)."""
    sample, lowered = _sample()
    needle = literal.encode()
    hay = sample
    if caseless:
        needle, hay = needle.lower(), lowered
    count = hay.count(needle) if needle else len(hay)
    size = max(len(hay), 1)
    # Unseen literals still differ: a short one is likelier than a long one.
    return (count + 0.5 ** max(0, len(needle) - 2)) / size


@lru_cache(maxsize=65536)
def stop_rate(literal: str, caseless: bool) -> float:
    """How often the trie scan stops for this literal: the rate of its rarest usable byte."""
    needle = literal.encode()
    return min((_byte_rate(b, caseless) for b in needle[:max(1, len(needle) - 3)]),
               default=1.0)


STOP_WEIGHT = 1 / 1000


@lru_cache(maxsize=1)
def _unigram() -> tuple[float, ...]:
    sample, _ = _sample()
    counts = [1] * 256
    for b, n in Counter(sample).items():
        counts[b] += n
    total = sum(counts)
    return tuple(c / total for c in counts)


def _byte_rate(b: int, caseless: bool) -> float:
    rates = _unigram()
    if caseless and 65 <= (b & 0xDF) <= 90:
        return rates[b | 0x20] + rates[b & 0xDF]
    return rates[b]


# --- textual clean-up before parsing --------------------------------------------------------

def _strip_lookarounds(src: str) -> str | None:
    """Remove lookaround groups (zero width, so removal only widens) and name no groups."""
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "\\":
            out.append(src[i:i + 2])
            i += 2
            continue
        if c == "[":
            j = _class_end(src, i)
            if j is None:
                return None
            out.append(src[i:j])
            i = j
            continue
        if c == "(" and src.startswith(("(?=", "(?!", "(?<=", "(?<!"), i):
            j = _group_end(src, i)
            if j is None:
                return None
            i = j
            if i < n and src[i] in "*+?{":
                return None  # a quantified lookaround: leave it to the slow path
            continue
        if c == "(" and src.startswith("(?<", i):  # (?<name>...) -> (?:...)
            close = src.find(">", i)
            if close == -1:
                return None
            out.append("(?:")
            i = close + 1
            continue
        if c == "(" and src.startswith("(?P<", i):
            close = src.find(">", i)
            if close == -1:
                return None
            out.append("(?:")
            i = close + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _class_end(src: str, i: int) -> int | None:
    j = i + 1
    if j < len(src) and src[j] == "^":
        j += 1
    if j < len(src) and src[j] == "]":
        j += 1
    while j < len(src):
        if src[j] == "\\":
            j += 2
            continue
        if src[j] == "]":
            return j + 1
        j += 1
    return None


def _group_end(src: str, i: int) -> int | None:
    depth = 0
    j = i
    while j < len(src):
        c = src[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            k = _class_end(src, j)
            if k is None:
                return None
            j = k
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _safe(src: str) -> bool:
    if _UNSAFE.search(src):
        return False
    # A brace that is not a repeat is a literal for the stdlib parser, but may be fuzzy
    # matching for ``regex``: refuse rather than guess.
    # (An escaped backslash before a brace makes it unescaped again; stay conservative.)
    return all(_REPEAT_BRACE.match(src, m.start()) for m in re.finditer(r"(?<!\\)\{", src))


# --- the walk -----------------------------------------------------------------------------

class _UnsupportedError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Char:
    """One text character as a set of first bytes and a byte length range."""

    ascii: frozenset[int]
    multibyte: bool  # may also be a non-ASCII character (2-4 bytes, or U+FFFD from 1-3)

    def regex(self, lo: int = 1, hi: int | None = 1) -> bytes:
        cls = _byte_class(self.ascii, self.multibyte)
        if not self.multibyte:
            return cls + _bounds(lo, hi)
        # Each character is 1 to 4 bytes: lo chars are at least lo bytes, hi at most 4*hi.
        return cls + _bounds(lo, None if hi is None else 4 * hi)


def _bounds(lo: int, hi: int | None) -> bytes:
    if lo == 1 and hi == 1:
        return b""
    if hi is None:
        return b"*" if lo == 0 else (b"+" if lo == 1 else b"{%d,}" % lo)
    if lo == hi:
        return b"{%d}" % lo
    return b"{%d,%d}" % (lo, hi)


def _byte_class(members: frozenset[int], multibyte: bool) -> bytes:
    items = sorted(members)
    if multibyte:
        items = items + list(range(0x80, 0x100))
    if len(items) == 1:
        return re.escape(bytes(items))
    parts: list[bytes] = []
    k = 0
    while k < len(items):
        j = k
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        lo, hi = items[k], items[j]
        esc_lo = b"\\x%02x" % lo
        esc_hi = b"\\x%02x" % hi
        parts.append(esc_lo if lo == hi else esc_lo + b"-" + esc_hi)
        k = j + 1
    return b"[" + b"".join(parts) + b"]"


_ANY = _Char(_ALL_ASCII, True)


def _literal_char(code: int, caseless: bool, lowered: bool = False) -> _Char | bytes:
    ch = chr(code)
    if code < 128:
        if code == _NL:
            raise _UnsupportedError("newline in a line pattern")
        if lowered:  # the haystack was ASCII-lowercased (case variants are handled apart)
            return ch.lower().encode()
        if caseless and ch.isalpha():
            lower = ch.lower()
            members = frozenset({ord(ch.lower()), ord(ch.upper())})
            return _Char(members, lower in CASE_VARIANTS)
        return bytes([code])
    if caseless and (ch.lower() != ch.upper() or ch.casefold() != ch):
        # a non-ASCII cased letter: may match an ASCII letter or other forms
        return _Char(frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"), True)
    return ch.encode()


def _set_char(items: list[Any], caseless: bool, lowered: bool = False) -> _Char:
    char = _set_char_any(items, caseless)
    if lowered:
        return _Char(frozenset(bytes(char.ascii).lower()), char.multibyte)
    return char


def _set_char_any(items: list[Any], caseless: bool) -> _Char:
    members: set[int] = set()
    multibyte = False
    for op, av in items:
        if op is sre_c.NEGATE:
            return _ANY
        if op is sre_c.LITERAL:
            ch = _literal_char(av, caseless)
            if isinstance(ch, _Char):
                members |= ch.ascii
                multibyte |= ch.multibyte
            elif len(ch) == 1:
                members.add(ch[0])
            else:
                multibyte = True
        elif op is sre_c.RANGE:
            lo, hi = av
            for code in range(lo, min(hi, 127) + 1):
                if code == _NL:
                    continue
                ch = _literal_char(code, caseless)
                if isinstance(ch, _Char):
                    members |= ch.ascii
                    multibyte |= ch.multibyte
                else:
                    members.add(ch[0])
            if hi >= 128:
                multibyte = True
        elif op is sre_c.CATEGORY:
            cat = av
            if cat is sre_c.CATEGORY_DIGIT:
                members |= _DIGITS
            elif cat is sre_c.CATEGORY_WORD:
                members |= _WORD
            elif cat is sre_c.CATEGORY_SPACE:
                members |= _SPACE
            else:  # the negated categories: almost anything
                return _ANY
            multibyte = True
        else:
            raise _UnsupportedError(f"set item {op}")
    return _Char(frozenset(members), multibyte)


def _min_width(items: list[Any]) -> int:
    try:
        sub = sre_parse.SubPattern(sre_parse.State(), items)
        return int(sub.getwidth()[0])
    except Exception:  # noqa: BLE001 - width is only a hint
        return 1


class _Walker:
    def __init__(self, lowered: bool = False) -> None:
        self.factors: list[tuple[tuple[str, bool], ...]] = []
        self.lowered = lowered

    # Relaxed regex --------------------------------------------------------------------------

    def seq(self, items: list[Any], caseless: bool, *, collect: bool) -> bytes:
        out: list[bytes] = []
        run: list[str] = []
        run_ci: list[bool] = []

        def flush() -> None:
            if collect and run:
                text = "".join(run)
                ci = any(run_ci)
                self.factors.append(((text, ci),))
            run.clear()
            run_ci.clear()

        for op, av in items:
            if op is sre_c.LITERAL:
                piece = _literal_char(av, caseless, self.lowered)
                ch = chr(av)
                if isinstance(piece, _Char):
                    out.append(piece.regex())
                    if av >= 128:  # a caseless non-ASCII letter: no usable literal
                        flush()
                        continue
                    run.append(ch)
                    run_ci.append(True)
                else:
                    out.append(re.escape(piece))
                    run.append(ch)
                    run_ci.append(False)
                continue
            flush()
            out.append(self.item(op, av, caseless, collect=collect))
        flush()
        return b"".join(out)

    def item(self, op: Any, av: Any, caseless: bool, *, collect: bool) -> bytes:
        if op is sre_c.NOT_LITERAL or op is sre_c.ANY:
            return _ANY.regex()
        if op is sre_c.IN:
            return _set_char(list(av), caseless, self.lowered).regex()
        if op is sre_c.AT:
            return b""
        if op in (sre_c.ASSERT, sre_c.ASSERT_NOT):
            return b""
        if op is sre_c.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            ci = caseless
            if add_flags & sre_c.SRE_FLAG_IGNORECASE:
                ci = True
            if del_flags & sre_c.SRE_FLAG_IGNORECASE:
                ci = False
            return b"(?:" + self.seq(list(body), ci, collect=collect) + b")"
        if op is sre_c.ATOMIC_GROUP:
            return b"(?:" + self.seq(list(av), caseless, collect=collect) + b")"
        if op is sre_c.BRANCH:
            alts: list[bytes] = []
            branch_factors: list[list[tuple[tuple[str, bool], ...]]] = []
            for branch in av[1]:
                sub = _Walker(self.lowered)
                alts.append(sub.seq(list(branch), caseless, collect=True))
                branch_factors.append(sub.factors)
            if collect and all(branch_factors):
                merged: list[tuple[str, bool]] = []
                for fs in branch_factors:
                    cheapest: tuple[tuple[str, bool], ...] = min(fs, key=_factor_cost)
                    merged.extend(cheapest)
                self.factors.append(tuple(dict.fromkeys(merged)))
            return b"(?:" + b"|".join(alts) + b")"
        if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
            lo, hi, body = av
            hi_v: int | None = None if hi is sre_c.MAXREPEAT else int(hi)
            body_items = list(body)
            if len(body_items) == 1:
                bop, bav = body_items[0]
                char: _Char | None = None
                if bop is sre_c.IN:
                    char = _set_char(list(bav), caseless, self.lowered)
                elif bop in (sre_c.ANY, sre_c.NOT_LITERAL):
                    char = _ANY
                elif bop is sre_c.LITERAL:
                    piece = _literal_char(bav, caseless, self.lowered)
                    if isinstance(piece, _Char):
                        char = piece
                    elif len(piece) == 1:
                        char = _Char(frozenset(piece), False)
                if char is not None:
                    return char.regex(lo, hi_v)
            inner = self.seq(body_items, caseless, collect=collect and lo >= 1)
            return b"(?:" + inner + b")" + _bounds(lo, hi_v)
        raise _UnsupportedError(f"construct {op}")


def _factor_cost(factor: tuple[tuple[str, bool], ...]) -> float:
    """Expected candidate lines plus the cost of the scan stopping on its bytes."""
    if any(len(text) < MIN_ANCHOR_CHARS for text, _ci in factor):
        return float("inf")
    return sum(estimate(text, ci) + STOP_WEIGHT * stop_rate(text, ci) for text, ci in factor)


def _factor_rate(factor: tuple[tuple[str, bool], ...]) -> float:
    return sum(estimate(text, ci) for text, ci in factor)


def _trim(items: list[Any]) -> list[Any]:
    """Drop leading and trailing parts that can match nothing: a search only needs the rest."""
    items = list(items)
    while items and _min_width(items[:1]) == 0:
        items.pop(0)
    while items and _min_width(items[-1:]) == 0:
        items.pop()
    # A repeat at either end only needs its minimum: fewer, shorter matches to report.
    for k in (0, -1):
        if items and items[k][0] in _REPEATS:
            lo, _hi, body = items[k][1]
            items[k] = (sre_c.MAX_REPEAT, (lo, lo, body))
    return items


_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT)


def _nested_repeat(items: Any, inside: bool = False) -> bool:
    """True when a repeat holds another variable-width repeat or an alternation: the shape
    on which a backtracking engine (``re``, which has no time limit) can take exponential
    time. A relaxed form without it is a sequence of single-character repeats and literals."""
    for op, av in items:
        if op in _REPEATS:
            lo, hi, body = av
            repeats = hi is sre_c.MAXREPEAT or int(hi) > 1
            if inside and lo != hi:
                return True
            if _nested_repeat(body, inside or repeats):
                return True
        elif op is sre_c.BRANCH:
            if inside:
                return True
            if any(_nested_repeat(branch, inside) for branch in av[1]):
                return True
        elif op in (sre_c.SUBPATTERN,):
            if _nested_repeat(av[3], inside):
                return True
        elif op in (sre_c.ATOMIC_GROUP,) and _nested_repeat(av, inside):
            return True
    return False


def backtrack_risk(pattern: str) -> bool:
    """True when the prefilter form of ``pattern`` could backtrack catastrophically: such a
    step is not prefiltered (it runs under the ``regex`` timeout instead), and lint refuses
    it."""
    try:
        stripped = _strip_lookarounds(pattern) if _safe(pattern) else None
        if stripped is None:
            return False
        parsed = sre_parse.parse(stripped)
        caseless = bool(parsed.state.flags & sre_c.SRE_FLAG_IGNORECASE)
        trimmed = _trim(list(parsed))
        relaxed = _Walker().seq(trimmed, caseless, collect=False) if trimmed else b""
        return bool(relaxed) and _nested_repeat(sre_parse.parse(relaxed.decode("latin-1")))
    except (_UnsupportedError, re.error, OverflowError, RecursionError, ValueError):
        return False


@lru_cache(maxsize=4096)
def analyze(pattern: str) -> StepFilter:
    """Derive the anchor and the relaxed bytes regex of one step's pattern."""
    try:
        if not _safe(pattern):
            raise _UnsupportedError("syntax the stdlib parser reads differently")
        stripped = _strip_lookarounds(pattern)
        if stripped is None:
            raise _UnsupportedError("unbalanced")
        parsed = sre_parse.parse(stripped)
        flags = parsed.state.flags
        if flags & (sre_c.SRE_FLAG_VERBOSE | sre_c.SRE_FLAG_LOCALE):
            raise _UnsupportedError("flags")
        caseless = bool(flags & sre_c.SRE_FLAG_IGNORECASE)
        walker = _Walker()
        items = list(parsed)
        walker.seq(items, caseless, collect=True)  # factors from the whole pattern
        trimmed = _trim(items)
        relaxed = _Walker().seq(trimmed, caseless, collect=False) if trimmed else b""
        if not relaxed or _min_width(trimmed) == 0:
            raise _UnsupportedError("may match the empty string")
        if _nested_repeat(sre_parse.parse(relaxed.decode("latin-1"))):
            # ``re`` has no time limit: a form that could backtrack is never run by it.
            raise _UnsupportedError("nested repeat in the relaxed form")
        compiled = re.compile(relaxed)
        if compiled.search(b""):
            raise _UnsupportedError("relaxed form matches the empty string")
        relaxed_lower = _Walker(lowered=True).seq(trimmed, caseless, collect=False)
        re.compile(relaxed_lower)
    except (_UnsupportedError, re.error, OverflowError, RecursionError, ValueError):
        return StepFilter((), float("inf"), None)
    usable = [f for f in walker.factors if _factor_cost(f) != float("inf")]
    if not usable:
        return StepFilter((), float("inf"), relaxed, relaxed_lower)
    best = min(usable, key=_factor_cost)
    return StepFilter(best, _factor_rate(best), relaxed, relaxed_lower)
