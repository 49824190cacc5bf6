"""Make a raw line into the text patterns see.

ANSI escape sequences are removed, NUL bytes dropped, a ``\\r`` progress-bar rewrite ends a
line (so an error glued to a tqdm bar is still seen on its own), and a launcher prefix
(``[rank3]:``, ``[default0]:``, srun's ``3: ``) is removed and kept as the rank.
"""

from __future__ import annotations

import re

__all__ = ["normalize"]

ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]")                  # two-byte escapes
RANK_RE = re.compile(r"\s{0,8}(?:\[(?:rank|default)(\d{1,6})\]:|(\d{1,6}): )[ \t]?")


def normalize(raw: str) -> list[tuple[str | None, str]]:
    """Split and clean one raw line; returns ``(rank, text)`` for each visible part."""
    if "\x1b" in raw:
        raw = ANSI_RE.sub("", raw)
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    parts = raw.split("\r") if "\r" in raw else [raw]
    out: list[tuple[str | None, str]] = []
    rank: str | None = None
    for index, part in enumerate(parts):
        if not part and (index > 0 or len(parts) > 1):
            continue
        m = RANK_RE.match(part)
        if m:
            rank = m.group(1) or m.group(2)
        out.append((rank, part[m.end():] if m else part))
    return out or [(None, "")]
