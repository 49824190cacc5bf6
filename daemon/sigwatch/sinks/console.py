"""``ConsoleSink`` and the text form of detections: what a person reads at 3 a.m.

Severity first and in colour (on a terminal, unless ``NO_COLOR`` is set), where it happened,
the line (shortened; the full text is in the JSON), the context lines, then the fix with its
steps and runbook. Fallout names its root cause in one line instead of repeating the fix.
Byte offsets and stream keys are left to the JSON form.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from sigwatch.model import Detection, Severity
from sigwatch.visible import visible

__all__ = ["ConsoleSink", "Style", "format_detection", "format_report", "format_update",
           "use_colour"]

MAX_LINE_CHARS = 240
MAX_CONTEXT_LINES = 8

_COLOURS = {Severity.CRITICAL: "1;97;41", Severity.ERROR: "1;31", Severity.WARNING: "1;33",
            Severity.INFO: "36"}


def use_colour(stream: TextIO, choice: str = "auto") -> bool:
    """``always``/``never``, or ``auto``: a terminal and no ``NO_COLOR`` (no-color.org)."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Style:
    """ANSI styling that turns into nothing without colour."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour

    def _sgr(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour else text

    def severity(self, severity: Severity) -> str:
        return self._sgr(_COLOURS[severity], f"{severity.label.upper():8}")

    def bold(self, text: str) -> str:
        return self._sgr("1", text)

    def dim(self, text: str) -> str:
        return self._sgr("2", text)


def shorten(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` cut to ``limit`` characters with the cut marked (the JSON keeps it whole);
    controls and bidirectional overrides shown as escapes, never sent to the terminal."""
    text = visible(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 1]}… [{len(text) - limit + 1} more characters in the JSON]"


def _where(d: Detection) -> str:
    job = f" (job {visible(d.job)})" if d.jobs else ""
    if not d.has_line:
        return visible(d.path or d.source) + job
    rank = f", rank {visible(d.rank)}" if d.rank is not None else ""
    return f"{visible(d.path)}:{d.line}{rank}{job}"


def format_update(d: Detection, *, style: Style | None = None) -> str:
    """A count update of a folded incident: one line, not the whole block again."""
    s = style or Style(colour=False)
    return (f"{s.severity(d.severity)} {s.bold(visible(d.title))}  {s.dim(d.signature)}  "
            f"seen {d.occurrence:,} times (+{d.repeats:,}), last at {_where(d)}")


def format_detection(d: Detection, *, style: Style | None = None,
                     fallout: Sequence[Detection] = ()) -> str:
    """One detection as a block of readable lines (a count update as one line)."""
    if d.incident:
        return format_update(d, style=style)
    s = style or Style(colour=False)
    pad = " " * 9
    out = [f"{s.severity(d.severity)} {s.bold(d.title)}  {s.dim(d.signature)}",
           f"{pad}at {_where(d)}"]
    if d.text is not None:
        for line in d.context[-MAX_CONTEXT_LINES:]:
            out.append(f"{pad}{s.dim('  ' + shorten(line, 160))}")
        out.append(f"{pad}> {shorten(d.text)}")
    else:
        out.append(f"{pad}{visible(d.about)}")
    for key, value in d.facts:
        out.append(f"{pad}  {visible(key)}: {visible(value)}")
    if d.root_cause is not None:
        out.append(f"{pad}fallout of {d.root_cause.signature}: "
                   f"{shorten(d.root_cause.text, 120)}")
    elif d.remediation.summary:
        out.append(f"{pad}{s.bold('fix:')} {visible(d.remediation.summary)}")
        for number, step in enumerate(d.remediation.steps, 1):
            out.append(f"{pad}  {number}. {visible(step)}")
        if d.remediation.runbook:
            out.append(f"{pad}runbook: {d.remediation.runbook}")
    for f in fallout:
        out.append(f"{pad}{s.dim('└')} also {f.severity.label} {f.signature} at {_where(f)}: "
                   f"{shorten(f.text or f.about, 100)}")
    return "\n".join(out)


def _fold(detections: Sequence[Detection]) -> list[tuple[Detection, list[Detection]]]:
    """Each detection with the fallout that names it as root cause folded under it."""
    roots: dict[tuple[str, str, int], int] = {}
    out: list[tuple[Detection, list[Detection]]] = []
    for d in detections:
        rc = d.root_cause
        key = (rc.signature, rc.path, rc.offset) if rc is not None else None
        if key is not None and key in roots:
            out[roots[key]][1].append(d)
            continue
        roots[(d.signature, d.path, d.offset if d.offset is not None else -1)] = len(out)
        out.append((d, []))
    return out


def format_report(detections: Sequence[Detection], *, inputs: int, style: Style) -> str:
    """A scan's text output: folded detections, then a one-line summary."""
    blocks = [format_detection(d, style=style, fallout=f) for d, f in _fold(detections)]
    files = "input" if inputs == 1 else "inputs"
    if not detections:
        return f"no detections in {inputs} {files}\n"
    by_sev = Counter(d.severity for d in detections)
    parts = ", ".join(f"{by_sev[sev]} {sev.label}" for sev in sorted(by_sev, reverse=True))
    folded = sum(len(f) for _d, f in _fold(detections))
    tail = f"; {folded} shown as fallout of their root cause" if folded else ""
    noun = "detection" if len(detections) == 1 else "detections"
    summary = f"{len(detections)} {noun} ({parts}) in {inputs} {files}{tail}"
    return "\n\n".join(blocks) + "\n\n" + style.bold(summary) + "\n"


class ConsoleSink:
    """Writes each detection as it arrives (fallout names its root cause in one line)."""

    name = "console"

    def __init__(self, stream: TextIO, *, colour: bool | None = None) -> None:
        self._stream = stream
        self._style = Style(use_colour(stream) if colour is None else colour)

    def emit(self, detection: Detection) -> None:
        self._stream.write(format_detection(detection, style=self._style) + "\n\n")

    def flush(self) -> None:
        self._stream.flush()

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        self.flush()
