"""Text from logs and file names made safe to show to a person (a terminal, a page, a pager).

A log writer controls the bytes of its lines and the names of its files. Shown raw, a lone ESC
or a C1 control (``\\x9b`` is a CSI on many terminals) drives the operator's terminal, a
bidirectional override (U+202E) makes text read backwards, and a file name that is not UTF-8
(Python holds its bytes as surrogates, ``os.fsdecode``) cannot even be encoded. ``visible``
writes each of them as an escape a person can read (``\\x1b``, ``\\u202e``, ``\\xff``) and
returns every other text unchanged (one regex search when there is nothing to do).

The JSON forms (event log, API) keep the exact text instead: data, not display.
"""

from __future__ import annotations

import re

__all__ = ["visible"]

# C0 controls but tab, DEL, C1 controls, the bidirectional marks, overrides and isolates, and
# surrogates (a file name's undecodable bytes, or a lone half of a pair).
_UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte of a name
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with controls, bidirectional overrides and undecodable bytes escaped."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)
