"""Make a raw line into the text patterns see.

ANSI escape sequences are removed (and their rsyslog-escaped form, ``#033[2m``: rsyslog writes
control characters as ``#`` and three octal digits), NUL bytes dropped, a ``\\r`` progress-bar
rewrite ends a line (so an error glued to a tqdm bar is still seen on its own), and a launcher
prefix
(``[rank3]:``, ``[default0]:``, srun's ``3: ``, MPI's ``[1,3]<stderr>:``, Ray's
``(RayWorker pid=123)``, DeepSpeed's ``[Rank 0]``, pdsh's ``10.0.0.7: ``, docker compose's
``tei-1  | ``, ``kubectl logs --prefix``'s ``[pod/NAME/CONTAINER]``) is removed and kept as the
rank.

Launchers nest (srun runs torchrun, which runs ranks that log with their own timestamps), and
some put a timestamp or a level in front of the tag, so the start of a line is read as a short
run of *envelope* items: rank tags, timestamps, levels. The text patterns see starts after the
last rank tag; timestamps and levels are recognised (the line's time, its level) but stay in
the text when no rank tag follows them. Several tags give a composite rank, outer first
(``0/3`` for srun task 0 printing torch rank 3), so two srun tasks' local ranks never merge.
The rank goes into the detection, never into a metric label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import tzinfo

from sigwatch.framing.timestamps import match_timestamp

__all__ = ["NormalizedLine", "Prefix", "normalize", "normalize_line", "parse_prefix"]

ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]")                  # two-byte escapes
# rsyslog's $EscapeControlCharactersOnReceive writes ESC as "#033": colours arrive as "#033[2m".
SYSLOG_ANSI_RE = re.compile(r"#033\[[0-?]*[ -/]*[@-~]")
# srun --label: only at the very start of the line (after srun's right-aligning blanks). A
# number followed by ": " anywhere else is text ("retry 10: failed"), and "12:30:45" is a time.
# A line cannot say whether "8080: bind failed" is task 8080 or a port, so task ids stop at
# SRUN_MAX_TASK: above it a leading number is far more often a port (8080, 29500) than the
# task of a job with more tasks than that printing through one labelled stream.
SRUN_RE = re.compile(r"[ \t]{0,8}(0|[1-9]\d{0,3}): [ \t]?")
SRUN_MAX_TASK = 4095
# pdsh (DeepSpeed's multi-node launcher) prefixes each line with the host it came from; only an
# IPv4 address is taken (``10.0.0.7: [rank0]: ...``): a bare word and a colon is too often text.
PDSH_RE = re.compile(r"(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?=: )")
# docker compose (and podman-compose) interleave their containers' output behind a column of
# the service's name and index, padded to one width: ``text-embeddings-1  | Error: ...`` (v2),
# ``tei_1  | ...`` (v1). The index and the padded bar are what tell it from text; the
# container is kept as the rank, so two containers' lines never join.
COMPOSE_RE = re.compile(r"(?P<svc>[a-z0-9][a-z0-9_.-]{0,62}[-_]\d{1,3})[ \t]+\|(?: |$)")
# Tags that may appear anywhere in the envelope, each with the rank they carry.
TAG_RE = re.compile(
    r"\[(?:rank|default)(?P<torch>\d{1,6})\]:[ \t]?"                        # torchrun, --tee
    r"|\[\d{1,10},(?P<mpi>\d{1,7})\]<(?:stdout|stderr|stddiag)>:[ \t]?"     # Open MPI --tag-output
    r"|\((?:[A-Za-z_][\w.-]{0,63} )?pid=(?P<raypid>\d{1,10})"               # Ray worker
    r"(?:, ip=(?P<rayip>[0-9A-Fa-f.:]{2,45}))?\)[ \t]?"
    r"|\[Rank (?P<ds>\d{1,6})\][ \t]?"                                       # DeepSpeed log_dist
    r"|\[pod/(?P<pod>[\w.-]{1,253})/[\w.-]{1,63}\][ \t]?")                      # kubectl --prefix
LEVEL_RE = re.compile(
    r"(?P<open>\[)?(?P<level>TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|ERR|CRITICAL|CRIT"
    r"|FATAL|SEVERE)(?(open)\])(?=[ \t:\]|]|$):?")
# DeepSpeed's and logging's "[file.py:96:func]" after the level.
WHERE_RE = re.compile(r"\[[\w./<>-]{1,80}:\d{1,6}(?::[\w<>.-]{1,80})?\]")
SEP_RE = re.compile(r"[ \t]*(?:[-|][ \t]+)?")
LEVELS = {"TRACE": "debug", "DEBUG": "debug", "INFO": "info", "NOTICE": "info",
          "WARN": "warning", "WARNING": "warning", "ERR": "error", "ERROR": "error",
          "CRIT": "critical", "CRITICAL": "critical", "FATAL": "critical", "SEVERE": "critical"}
MAX_ITEMS = 8
# First characters an envelope item can start with: anything else ends the scan at once.
_TIME_START = frozenset("[0123456789JFMASONDIWEFT")  # ISO/kernel, syslog, glog, ctime days
_LEVEL_START = frozenset("[TDINWECFS")
_ITEM_START = _TIME_START | _LEVEL_START | frozenset("( \t")


@dataclass(frozen=True, slots=True)
class Prefix:
    """What the start of one line says: rank, time, level, and where the text begins."""

    rank: str | None = None
    time: float | None = None
    level: str | None = None
    end: int = 0


@dataclass(frozen=True, slots=True)
class NormalizedLine:
    """One visible part of a raw line, with what its prefix said."""

    rank: str | None
    text: str
    time: float | None = None
    level: str | None = None


_NOTHING = Prefix()
# Every rank tag holds one of these; a line without any (in its first characters) has no rank.
_MAYBE_TAG = re.compile(r"\[(?:rank|default)\d|\]<std|pid=\d|\[Rank \d|\[pod/")
_ENVELOPE_CHARS = 240


def _tag_rank(m: re.Match[str]) -> str:
    if m.group("torch") is not None:
        return m.group("torch")
    if m.group("mpi") is not None:
        return m.group("mpi")
    if m.group("raypid") is not None:
        ip = m.group("rayip")
        return f"pid={m.group('raypid')}" + (f",ip={ip}" if ip else "")
    if m.group("ds") is not None:
        return m.group("ds")
    return m.group("pod")


def _skip_sep(text: str, pos: int) -> int:
    m = SEP_RE.match(text, pos)
    return m.end() if m else pos


def parse_prefix(text: str, *, want_time: bool = False, year_hint: int | None = None,
                 tz: tzinfo | None = None, now: float | None = None) -> Prefix:
    """Read the envelope at the start of ``text`` (see the module docstring).

    ``want_time`` computes the timestamp's value (calendar arithmetic that the matching hot
    path does not need); ``year_hint``/``tz`` complete stamps without a year or a zone;
    ``now`` (the caller's clock) decides the year of a stamp that has none.
    """
    if not text:
        return _NOTHING
    ranks: list[str] = []
    pos = end = 0
    if text[0] not in _ITEM_START:
        if not text[0].islower() or "|" not in text[:80]:
            return _NOTHING  # most lines: one set lookup, or one short search
        service = COMPOSE_RE.match(text)
        if service is None:
            return _NOTHING
        ranks.append(service.group("svc"))
        pos = end = service.end()
    host = PDSH_RE.match(text) if text[0].isdigit() else None
    m = SRUN_RE.match(text) if not ranks else None
    if host is not None:
        ranks.append(host.group())
        pos = end = host.end() + 2
    elif m and int(m.group(1)) <= SRUN_MAX_TASK:
        ranks.append(m.group(1))
        pos = end = m.end()
    elif not ranks and not want_time and _MAYBE_TAG.search(text, 0, _ENVELOPE_CHARS) is None:
        return _NOTHING  # the matching path wants the rank only, and there is none
    stamp: float | None = None
    level: str | None = None
    found_time = False
    n = len(text)
    for _ in range(MAX_ITEMS):
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            break
        c = text[pos]
        if c not in _ITEM_START:
            break
        if c in "[(":
            tag = TAG_RE.match(text, pos)
            if tag:
                ranks.append(_tag_rank(tag))
                pos = end = tag.end()
                continue
        if not found_time and c in _TIME_START:
            ts = match_timestamp(text, pos, year_hint, tz=tz, want_time=want_time, now=now)
            closed = True
            if ts is None and c == "[":
                ts = match_timestamp(text, pos + 1, year_hint, tz=tz, want_time=want_time,
                                     now=now)
                closed = ts is not None and ts.end < n and text[ts.end] == "]"
            if ts is not None:
                found_time = True
                stamp = ts.time
                level = level or ts.level
                if not closed:  # "[W1120 10:02:11.690 123 file.cpp:12] msg": the message
                    break
                pos = ts.end + (1 if text[ts.end:ts.end + 1] == "]" else 0)
                pos = _skip_sep(text, pos)
                continue
        if level is None and c in _LEVEL_START:
            lv = LEVEL_RE.match(text, pos)
            if lv:
                level = LEVELS[lv.group("level")]
                pos = _skip_sep(text, lv.end())
                where = WHERE_RE.match(text, pos)
                if where:
                    pos = _skip_sep(text, where.end())
                continue
        break
    return Prefix("/".join(ranks) if ranks else None, stamp, level, end)


def _parts(raw: str) -> list[str]:
    if "\x1b" in raw:
        raw = ANSI_RE.sub("", raw)
    if "#033[" in raw:
        raw = SYSLOG_ANSI_RE.sub("", raw)
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    parts = raw.split("\r") if "\r" in raw else [raw]
    if len(parts) > 1:
        parts = [p for p in parts if p]
    return parts


def normalize(raw: str) -> list[tuple[str | None, str]]:
    """Split and clean one raw line; returns ``(rank, text)`` for each visible part."""
    out: list[tuple[str | None, str]] = []
    rank: str | None = None
    for part in _parts(raw):
        prefix = parse_prefix(part)
        if prefix.rank is not None:
            rank = prefix.rank
        out.append((rank, part[prefix.end:] if prefix.rank is not None else part))
    return out or [(None, "")]


def normalize_line(raw: str, *, year_hint: int | None = None,
                   tz: tzinfo | None = None, now: float | None = None) -> list[NormalizedLine]:
    """``normalize`` plus the time and level each part's prefix carries.

    A part without a timestamp of its own (a ``\\r`` rewrite) inherits the one before it.
    """
    out: list[NormalizedLine] = []
    rank: str | None = None
    stamp: float | None = None
    for part in _parts(raw):
        prefix = parse_prefix(part, want_time=True, year_hint=year_hint, tz=tz, now=now)
        if prefix.rank is not None:
            rank = prefix.rank
        if prefix.time is not None:
            stamp = prefix.time
        text = part[prefix.end:] if prefix.rank is not None else part
        out.append(NormalizedLine(rank, text, stamp, prefix.level))
    return out or [NormalizedLine(None, "")]
