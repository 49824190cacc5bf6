"""Small text helpers shared by the generic shapes: masking, frames, signals, evidence."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sigwatch.detectors.templates import WILDCARD, mask_tokens

__all__ = [
    "SIGNALS",
    "Frame",
    "clip",
    "is_user_frame",
    "mask",
    "signal_name",
]

MAX_TEXT = 300


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters (captures and keys stay bounded)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
