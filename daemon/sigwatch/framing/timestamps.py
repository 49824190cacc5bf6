"""The log's own time: the timestamp a line starts with, when it has one.

Detections and the runtime's ordering want the time the line was *written*, not the time it
was read (a restart, a backlog or a slow reader make the two differ by minutes). The forms
seen on training nodes are few: ISO-8601 / RFC 3339 (CRI logs carry nanoseconds), glog/absl
(``I1120 10:02:11.000123``, no year), syslog (``Nov 20 10:02:11``, no year), the kernel's
``[  123.456789]`` (seconds since boot: only meaningful with the boot time) and ctime
(``Fri Sep 22 11:52:15 2017``, which ``mpirun --timestamp-output`` glues to its rank tag).

Only the *start* of the text is looked at (``match_timestamp`` can start at an offset), so a
date quoted in the middle of a message is never taken for the line's time.
"""

from __future__ import annotations

import re
import time as time_mod
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo

__all__ = ["YEARLESS_AHEAD", "TimestampMatch", "match_timestamp", "parse_timestamp"]

_MONTHS = {name: i + 1 for i, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))}
_GLOG_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "critical"}

# One alternation so a line that starts with none of the forms costs one failed match.
_TS_RE = re.compile(
    r"(?P<iso>(?P<Y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})[T ](?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<tz>Z|z|[+-]\d{2}:?\d{2})?)"
    r"|(?P<glog>(?P<glevel>[IWEF])(?P<gm>\d{2})(?P<gd>\d{2}) (?P<gH>\d{2}):(?P<gM>\d{2}):"
    r"(?P<gS>\d{2})(?:\.(?P<gfrac>\d{1,9}))?)"
    r"|(?P<syslog>(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<sd>[ \d]\d) "
    r"(?P<sH>\d{2}):(?P<sM>\d{2}):(?P<sS>\d{2})(?:\.(?P<sfrac>\d{1,9}))?)"
    r"|(?P<kernel>\[ {0,12}(?P<ksec>\d{1,10})\.(?P<kfrac>\d{1,9})\])"
    # ctime(3), as Open MPI's ``mpirun --timestamp-output`` writes it before its rank tag
    r"|(?P<ctime>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<cmon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep"
    r"|Oct|Nov|Dec) (?P<cd>[ \d]\d) (?P<cH>\d{2}):(?P<cM>\d{2}):(?P<cS>\d{2}) (?P<cY>\d{4}))")
# The character after a timestamp must not continue a word or a number (``2024-11-20T10:02:113``).
_END_OK = frozenset(" \t]|:,;)-\r\n")
# A stamp without a year that lands this far ahead of now is last year's (``E1231 23:59:59``
# read on 1 January); closer, it is a node clock ahead of ours, which the year does not fix.
YEARLESS_AHEAD = 86400.0


@dataclass(frozen=True, slots=True)
class TimestampMatch:
    """A timestamp found at a position: its value (None when it cannot be placed in time),
    where the text after it starts, which form it was, and the level a glog prefix carries."""

    time: float | None
    end: int
    form: str  # iso | glog | syslog | kernel | ctime
    level: str | None = None


def _fraction(digits: str | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0


def _offset(text: str) -> tzinfo:
    if text in ("Z", "z"):
        return UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def _epoch(year: int, month: int, day: int, hour: int, minute: int, second: int,
           frac: float, zone: tzinfo | None) -> float | None:
    try:
        stamp = datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError:
        return None
    # A naive time is local time (what a process on this node printed), unless told otherwise.
    return stamp.timestamp() + frac


def match_timestamp(text: str, pos: int = 0, year_hint: int | None = None, *,
                    boot_time: float | None = None, tz: tzinfo | None = None,
                    want_time: bool = True, now: float | None = None) -> TimestampMatch | None:
    """The timestamp that starts exactly at ``pos`` in ``text``, or None.

    ``year_hint`` completes the forms without a year (glog, syslog; default: this year, or
    last year when this year's date is more than ``YEARLESS_AHEAD`` in the future, both
    judged at ``now``: the caller's injected clock, else the wall clock);
    ``boot_time`` (epoch seconds) places the kernel's relative stamps; ``tz`` is the zone of
    stamps that carry none (default: the local zone). ``want_time=False`` only finds the
    extent (cheaper: no calendar arithmetic).
    """
    m = _TS_RE.match(text, pos)
    if m is None:
        return None
    end = m.end()
    if end < len(text) and text[end] not in _END_OK and not (
            text[end] == "[" and m.group("ctime")):  # mpirun glues its tag to the stamp
        return None
    if m.group("iso"):
        kind = "iso"
    elif m.group("glog"):
        kind = "glog"
    elif m.group("syslog"):
        kind = "syslog"
    elif m.group("ctime"):
        kind = "ctime"
    else:
        kind = "kernel"
    level = _GLOG_LEVELS[m.group("glevel")] if kind == "glog" else None
    if not want_time:
        return TimestampMatch(None, end, kind, level)
    value: float | None
    if kind == "iso":
        zone = _offset(m.group("tz")) if m.group("tz") else tz
        value = _epoch(int(m.group("Y")), int(m.group("m")), int(m.group("d")),
                       int(m.group("H")), int(m.group("M")), int(m.group("S")),
                       _fraction(m.group("frac")), zone)
    elif kind in ("glog", "syslog"):
        if kind == "glog":
            fields = (int(m.group("gm")), int(m.group("gd")), int(m.group("gH")),
                      int(m.group("gM")), int(m.group("gS")), _fraction(m.group("gfrac")))
        else:
            fields = (_MONTHS[m.group("mon")], int(m.group("sd")), int(m.group("sH")),
                      int(m.group("sM")), int(m.group("sS")), _fraction(m.group("sfrac")))
        value = _yearless(year_hint, fields, tz, now)
    elif kind == "ctime":
        value = _epoch(int(m.group("cY")), _MONTHS[m.group("cmon")], int(m.group("cd")),
                       int(m.group("cH")), int(m.group("cM")), int(m.group("cS")), 0.0, tz)
    else:
        since_boot = int(m.group("ksec")) + _fraction(m.group("kfrac"))
        value = boot_time + since_boot if boot_time is not None else None
    return TimestampMatch(value, end, kind, level)


def _yearless(year_hint: int | None, fields: tuple[int, int, int, int, int, float],
              tz: tzinfo | None, now: float | None = None) -> float | None:
    """A stamp without a year placed in ``year_hint``, or this year unless that puts it more
    than ``YEARLESS_AHEAD`` in the future (then last year)."""
    month, day, hour, minute, second, frac = fields
    if year_hint is not None:
        return _epoch(year_hint, month, day, hour, minute, second, frac, tz)
    if now is None:
        now = time_mod.time()
    year = time_mod.localtime(now).tm_year
    value = _epoch(year, month, day, hour, minute, second, frac, tz)
    if value is not None and value > now + YEARLESS_AHEAD:
        return _epoch(year - 1, month, day, hour, minute, second, frac, tz)
    return value


def parse_timestamp(text: str, year_hint: int | None = None, *,
                    boot_time: float | None = None, tz: tzinfo | None = None) -> float | None:
    """Epoch seconds of the timestamp ``text`` starts with (leading blanks allowed), or None.

    None also for a kernel ``[ 123.456]`` stamp when ``boot_time`` is not given: a time since
    boot is not a time of day.
    """
    start = len(text) - len(text.lstrip(" \t"))
    found = match_timestamp(text, start, year_hint, boot_time=boot_time, tz=tz)
    return found.time if found else None
