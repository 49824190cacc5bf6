"""Small text helpers shared by the generic shapes: masking, frames, signals, evidence."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sigwatch.detectors.templates import WILDCARD, mask_tokens

__all__ = [
    "ISO_STAMP",
    "SIGNALS",
    "Frame",
    "clip",
    "is_user_frame",
    "literal_first",
    "mask",
    "signal_name",
]

MAX_TEXT = 300
# An ISO 8601 date and time as loggers print it ("2024-05-01 12:00:00,123",
# "2022-11-08T12:29:36.521461192Z", "...+01:00"): one pattern for every reader that skips one.
ISO_STAMP = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters (captures and keys stay bounded)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def literal_first(pattern: str) -> str:
    """``pattern`` rewritten so that each of its top-level alternatives starts with a literal.

    ``re`` skips ahead to the positions where a match can start only when every alternative
    starts with a literal character; one that starts with ``\\b`` makes it try every
    alternative at every position (the vocabulary of ``records.classify`` took 30 to 150 µs
    a line that way, 5 to 15 µs this way). ``\\bword`` becomes ``w(?<!\\ww)ord`` (the same
    boundary, checked after the first letter) and ``\\b(?:a|b)rest`` becomes
    ``\\barest|\\bbrest``, then the same. Matches are the same (``test_generic_records``
    compares both forms on every line of the corpora); an alternative of another form is left
    as it is. Leading inline flags stay in front; ``re.IGNORECASE`` defeats the skipping, so
    callers match lowercased text with lowercase patterns instead.
    """
    flags = re.match(r"\(\?[aiLmsux]+\)", pattern)
    head = flags.group() if flags else ""
    out: list[str] = []
    for alt in _alternatives(pattern[len(head):]):
        if alt.startswith("\\b(?:") and "(?P<" not in alt:
            end = _group_end(alt, 2)
            inner, rest = alt[5:end], alt[end + 1:]
            if rest[:1] not in ("?", "*", "+", "{"):
                out.extend(_boundary_after_first(f"\\b{sub}{rest}")
                           for sub in _alternatives(inner))
                continue
        out.append(_boundary_after_first(alt))
    return head + "|".join(out)


def _boundary_after_first(alt: str) -> str:
    if alt.startswith("\\b") and len(alt) > 2 and alt[2].isascii() and alt[2].isalnum():
        first = alt[2]
        return f"{first}(?<!\\w{first}){alt[3:]}"
    return alt


def _alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of ``pattern`` (escapes, classes and groups kept whole)."""
    parts: list[str] = []
    depth, start, i = 0, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _class_end(pattern: str, i: int) -> int:
    """The index of the ``]`` closing the class opened at ``pattern[i]``."""
    i += 1
    if pattern[i:i + 1] == "^":
        i += 1
    if pattern[i:i + 1] == "]":
        i += 1
    while pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _group_end(pattern: str, i: int) -> int:
    """The index of the ``)`` closing the group opened at ``pattern[i]``."""
    depth = 0
    while True:
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1


_QUOTED_RE = re.compile(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"")
_LONG_ID_RE = re.compile(r"\b[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,}){0,4}\b")


def mask(text: str, *, quoted: bool = False) -> str:
    """``text`` with numbers, hex, paths and ids replaced by ``<*>`` (the miner's masking).

    ``quoted``: quoted values are masked too (a ``KeyError: 'x'`` keyed by its class alone
    would merge every missing key; a key per value would make every id its own incident).
    """
    if quoted:
        text = _QUOTED_RE.sub(WILDCARD, text)
    text = _LONG_ID_RE.sub(WILDCARD, text)
    return clip(" ".join(mask_tokens(text)), 200)


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python stack: file, line and function."""

    path: str
    line: int
    func: str

    def describe(self) -> str:
        if not self.path:  # a C++ frame as Paddle prints it: its function alone
            return self.func
        where = f"{self.path}:{self.line}"
        return f"{where} in {self.func}" if self.func else where


# Frames that are not the user's code: installed packages, the standard library, frozen
# modules, code run from strings, and console scripts (``bin/torchrun`` is a launcher).
_LIBRARY_RE = re.compile(
    r"[/\\](?:site|dist)-packages[/\\]"
    r"|[/\\]lib(?:64)?[/\\]python\d(?:\.\d+)?[/\\]"
    r"|\\Lib\\"
    r"|^<(?:frozen |string>|__array_function__)"
    r"|[/\\]bin[/\\][^/\\.]+$"
    r"|^(?:/usr)?/lib/python")


def is_user_frame(path: str) -> bool:
    """True for a frame of the user's own code (not a library, the stdlib or a launcher)."""
    return _LIBRARY_RE.search(path) is None


SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS",
}
"""Linux signal numbers as processes and launchers report them."""


def signal_name(number: int) -> str:
    return SIGNALS.get(number, f"signal {number}")
