"""The analysis of a pattern library, cached on disk so that start-up does not redo it.

Deriving each step's anchor and relaxed regex (``engine.analysis``) is most of the start-up
cost of a large library. The result depends only on the step regexes, on the analysis code
and on the reference sample it counts rarity in, so it is stored in one JSON file whose name
is a hash of all of those: a changed pattern file, another version of sigwatch or another
sample gives another name, and an old file is simply not read again.

Safe by construction:

- a file that does not parse or does not have the expected shape is ignored and rebuilt;
- the file is written to a unique temporary name and renamed into place, so two processes
  starting at once both succeed and a reader never sees half a file;
- a location that cannot be created or written means no cache, never an error.

The folder is ``$SIGWATCH_CACHE_DIR`` (empty or ``off``: no cache), else
``$XDG_CACHE_HOME/sigwatch``, else ``~/.cache/sigwatch``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from sigwatch.engine import analysis
from sigwatch.engine.analysis import StepFilter, analyze

__all__ = ["CACHE_VERSION", "analyze_all", "cache_dir", "unigram"]

CACHE_VERSION = 1
_OFF = ("", "off", "0", "none")


def cache_dir() -> Path | None:
    """Where the cache lives, or None when it is turned off."""
    explicit = os.environ.get("SIGWATCH_CACHE_DIR")
    if explicit is not None:
        return None if explicit.strip().lower() in _OFF else Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "sigwatch"
    home = os.environ.get("HOME")
    return Path(home) / ".cache" / "sigwatch" if home else None


@lru_cache(maxsize=1)
def _code_key() -> str:
    """What besides the regexes the analysis depends on: its code, its sample, Python."""
    h = hashlib.sha256(f"v{CACHE_VERSION}\0{sys.version_info[:2]}\0".encode())
    for module in (analysis.__file__, __file__):
        try:
            h.update(Path(module).read_bytes())
        except OSError:
            h.update(b"?")
    sample, _lowered = analysis._sample()
    h.update(hashlib.sha256(sample).digest())
    return h.hexdigest()


def _encode(f: StepFilter) -> list[Any]:
    return [[[text, ci] for text, ci in f.anchor],
            f.anchor_rate if math.isfinite(f.anchor_rate) else None,
            f.relaxed.decode("latin-1") if f.relaxed is not None else None,
            f.relaxed_lower.decode("latin-1") if f.relaxed_lower is not None else None]


def _decode(raw: Any) -> StepFilter:
    anchor_raw, rate, relaxed, lower = raw
    anchor = tuple((str(text), bool(ci)) for text, ci in anchor_raw)
    if any(not isinstance(text, str) for text, _ci in anchor_raw):
        raise TypeError("anchor")
    for value in (relaxed, lower):
        if value is not None and not isinstance(value, str):
            raise TypeError("relaxed")
    return StepFilter(anchor, float("inf") if rate is None else float(rate),
                      relaxed.encode("latin-1") if relaxed is not None else None,
                      lower.encode("latin-1") if lower is not None else None)


def _read(path: Path, sources: list[str]) -> tuple[dict[str, StepFilter], list[int]] | None:
    try:
        raw = json.loads(path.read_bytes())
        if not isinstance(raw, dict) or raw.get("version") != CACHE_VERSION:
            return None
        steps = raw["steps"]
        if not isinstance(steps, dict):
            return None
        filters = {src: _decode(steps[src]) for src in sources}
        counts = [int(c) for c in raw["unigram"]]
        if len(counts) != 256:
            return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return filters, counts


def _write(path: Path, filters: dict[str, StepFilter], counts: list[int]) -> None:
    body = json.dumps({"version": CACHE_VERSION,
                       "steps": {src: _encode(f) for src, f in filters.items()},
                       "unigram": counts}, separators=(",", ":")).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".analysis-", dir=path.parent)
    except OSError:
        return  # read-only or missing location: no cache
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _sample_counts() -> list[int]:
    sample, _lowered = analysis._sample()
    counts = [0] * 256
    for byte, n in zip(*_byte_counts(sample), strict=True):
        counts[byte] = n
    return counts


def _byte_counts(data: bytes) -> tuple[list[int], list[int]]:
    present = sorted(set(data))
    return present, [data.count(bytes([b])) for b in present]


_UNIGRAM: list[int] | None = None


def unigram() -> list[int]:
    """Byte counts of the reference sample (what the prefilter picks rare bytes with)."""
    global _UNIGRAM  # noqa: PLW0603 - a per-process memo filled from the cache when there is one
    if _UNIGRAM is None:
        _UNIGRAM = _sample_counts()
    return _UNIGRAM


def analyze_all(sources: Iterable[str], *, directory: Path | None = None,
                use_cache: bool = True) -> dict[str, StepFilter]:
    """``analyze`` of every step regex, from the cache when it holds this exact library."""
    global _UNIGRAM  # noqa: PLW0603
    wanted = sorted(set(sources))
    folder = directory if directory is not None else (cache_dir() if use_cache else None)
    if folder is None:
        return {src: analyze(src) for src in wanted}
    key = hashlib.sha256(_code_key().encode() + b"\0" + "\0".join(wanted).encode()).hexdigest()
    path = folder / f"analysis-{key[:40]}.json"
    found = _read(path, wanted)
    if found is not None:
        filters, counts = found
        if _UNIGRAM is None:
            _UNIGRAM = counts
        return filters
    filters = {src: analyze(src) for src in wanted}
    _write(path, filters, unigram())
    return filters
