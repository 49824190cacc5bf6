"""Run text through the real pipeline with the generic layer, whole or in uneven pieces."""

from __future__ import annotations

import functools
import textwrap
import tomllib
from collections.abc import Sequence
from pathlib import Path

from sigwatch.app import build_generic
from sigwatch.clock import FakeClock
from sigwatch.framing.lines import LineFramer
from sigwatch.framing.normalize import normalize
from sigwatch.model import Detection, Severity, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened

__all__ = ["NO_SIGNATURES", "corpus_lines", "generic_scan", "loud", "only", "text_of"]

NO_SIGNATURES = PatternSet(())
"""An empty library: what the generic layer catches on its own."""

_ENGINES: dict[int, tuple[PatternSet, Engine]] = {}


def _engine(library: PatternSet) -> Engine:
    """One compiled engine per library for the whole session (compiling is the slow part)."""
    known = _ENGINES.get(id(library))
    if known is None or known[0] is not library:
        known = (library, Engine(library))
        _ENGINES[id(library)] = known
    return known[1]


CORPUS = Path(__file__).resolve().parents[1] / "corpus"


@functools.cache
def corpus_lines() -> tuple[str, ...]:
    """Every distinct line (as the pipeline normalises it) of the real excerpts and of the
    healthy logs: what a rewritten pattern must still match the same way."""
    texts = [tomllib.loads(p.read_text(encoding="utf-8"))["text"]
             for p in sorted(CORPUS.glob("real/*/*.toml"))]
    texts += [p.read_text(encoding="utf-8", errors="replace")
              for p in sorted(CORPUS.glob("goodlogs/*.log"))]
    lines = {text for t in texts for raw in t.splitlines() for _rank, text in normalize(raw)}
    return tuple(sorted(lines))


def text_of(block: str) -> str:
    """A dedented log excerpt ending with a newline."""
    return textwrap.dedent(block).lstrip("\n")


def generic_scan(text: str, *, library: PatternSet = NO_SIGNATURES,
                 pieces: Sequence[int] = (), clock: FakeClock | None = None,
                 mode: str = "chunk", close: bool = True, kind: str = "scan",
                 wait: float = 0.0, gap: float = 0.0) -> list[Detection]:
    """Every detection of the pipeline (signatures of ``library`` and the generic layer).

    ``pieces``: feed the bytes in pieces of these sizes (cycled), as a tail reads a growing
    file, ``gap`` seconds apart (the daemon's tick runs between them); ``wait``: then let this
    many seconds pass with nothing read (the tick runs);
    ``close``: end the stream at the end (as ``scan`` does).
    """
    clock = clock or FakeClock()
    sink = CollectingSink()
    pipeline = Pipeline(_engine(library), [sink], clock=clock,
                        detectors=[build_generic(clock=clock)], detector_mode=mode)
    info = StreamInfo("test", "test.log", "test.log")
    pipeline.open(StreamOpened(1, info, kind=kind))
    data = text.encode("utf-8")
    framer = LineFramer()
    if pieces:
        pos, turn = 0, 0
        while pos < len(data):
            size = pieces[turn % len(pieces)]
            pipeline.process(1, framer.feed(data[pos:pos + size]))
            pos, turn = pos + size, turn + 1
            if gap:
                clock.advance(gap)
                pipeline.tick()
    else:
        pipeline.process(1, framer.feed(data))
    pipeline.process(1, framer.finish())
    if wait:
        clock.advance(wait)
        pipeline.tick()
    if close:
        pipeline.finish(1)
    return list(sink.detections)


def loud(found: Sequence[Detection]) -> list[Detection]:
    """Detections at warning or above (what counts as an alarm)."""
    return [d for d in found if d.severity >= Severity.WARNING]


def only(found: Sequence[Detection], signature: str) -> Detection:
    """The one detection of ``signature`` (the test fails if there is none or several)."""
    hits = [d for d in found if d.signature == signature]
    assert len(hits) == 1, f"{signature}: {[(d.signature, d.text) for d in found]}"
    return hits[0]
