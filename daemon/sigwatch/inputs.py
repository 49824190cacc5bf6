"""The sources of a configuration: files, the journal, the kernel log and named pipes.

Part of the composition root (with ``app``): it reads ``SourceConfig`` entries and builds the
``Source`` for each kind, with the callbacks that turn their losses into metrics, and says
what each source's streams hold (``content``) so the pipeline applies only the signatures
meant for them (a kernel-only Xid signature does not fire on a job log that quotes it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from sigwatch.clock import Clock
from sigwatch.config import SourceConfig
from sigwatch.framing.container import framer_for
from sigwatch.model import StreamInfo
from sigwatch.sources.base import Source
from sigwatch.sources.discovery import SourceSpec
from sigwatch.sources.file import Framer, MakeFramer
from sigwatch.sources.files import FileSource, TailOptions
from sigwatch.sources.identity import JobIdentity, PathLabels, identify
from sigwatch.sources.journal import JournalSource
from sigwatch.sources.kmsg import DEVICE, KmsgSource
from sigwatch.sources.pipe import PipeSource
from sigwatch.sources.watching import Hints
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["Inputs", "build_sources", "container_framer"]

log = structlog.get_logger("sigwatch.inputs")


@dataclass(slots=True)
class Inputs:
    """The built sources, what their streams hold, and the globs file sources watch."""

    sources: list[Source] = field(default_factory=list)
    content: dict[str, str] = field(default_factory=dict)
    globs: list[str] = field(default_factory=list)
    files: FileSource | None = None
    # files and pipe sources: their ``labels_from_path`` (None: the CRI layout only)
    path_labels: dict[str, PathLabels | None] = field(default_factory=dict)

    def identify(self, info: StreamInfo) -> JobIdentity | None:
        """A stream's job and rank from its path (``sigwatch.sources.identity``)."""
        if info.source not in self.path_labels:
            return None  # journal, kmsg: the node's own streams, no job of their own
        return identify(info.path, self.path_labels[info.source])


def container_framer(fmt: str, max_line_bytes: int) -> MakeFramer:
    """A framer factory reading files as ``fmt`` (``auto``: recognised from the first line)."""
    def make(offset: int) -> Framer:
        return framer_for(fmt, offset=offset, max_line_bytes=max_line_bytes)
    return make


def build_sources(configs: Sequence[SourceConfig], *, clock: Clock, options: TailOptions,
                  metrics: SelfMetrics | None, hints: Hints | None,
                  exclude_paths: tuple[str, ...] = (),
                  heartbeat: Callable[[], None] | None = None) -> Inputs:
    """One ``FileSource`` for every ``files`` entry together, one source per other entry."""
    out = Inputs()

    def loss(reason: str) -> Callable[[str, int], None]:
        def count(source: str, _count: int) -> None:
            log.warning("data_loss", source=source, reason=reason, count=_count)
            if metrics is not None:
                metrics.data_loss.labels(source, reason).inc()
        return count

    def error(source: str, text: str) -> None:
        log.warning("source_error", source=source, error=text)

    files = [c for c in configs if c.kind == "files"]
    out.path_labels = {c.name: c.path_labels() for c in configs if c.kind in ("files", "pipe")}
    if files:
        # No format given: "auto", so container logs (CRI, Docker) are read as lines by default.
        framers = {c.name: container_framer(c.format or "auto", options.max_line_bytes)
                   for c in files if c.format != "plain"}
        specs = [SourceSpec(c.name, tuple(c.paths), tuple(c.exclude), c.start_at)
                 for c in files]
        out.files = FileSource(sources=specs, clock=clock, options=options, metrics=metrics,
                               hints=hints, framers=framers, exclude_paths=exclude_paths,
                               heartbeat=heartbeat)
        out.sources.append(out.files)
        out.globs = [p for c in files for p in c.paths]
    for c in configs:
        source: Source
        if c.kind == "journal":
            journal = JournalSource(c.name, units=c.units, identifiers=c.identifiers,
                                    kernel=c.kernel, lookback=c.lookback_seconds,
                                    on_suppressed=loss("journal_suppressed"),
                                    on_error=error)
            out.content[c.name] = c.content or journal.content
            source = journal
        elif c.kind == "kmsg":
            name = c.name

            def fallback(name: str = name, lookback: float | None = c.lookback_seconds,
                         ) -> Source:
                log.warning("kmsg_unreadable_using_journal", source=name)
                return JournalSource(name, kernel=True, lookback=lookback, on_error=error)

            source = KmsgSource(c.name, path=c.paths[0] if c.paths else DEVICE,
                                on_loss=loss("kmsg_overrun"),
                                lookback=c.lookback_seconds, fallback=fallback)
            out.content[c.name] = c.content or "kernel"
        elif c.kind == "pipe":
            source = PipeSource(c.name, path=c.paths[0], max_line_bytes=options.max_line_bytes,
                                on_error=error)
            out.content[c.name] = c.content or "job"
        else:
            if c.content is not None:
                out.content[c.name] = c.content
            continue
        out.sources.append(source)
    if metrics is not None:
        metrics.declare_input_kinds([c.name for c in files],
                                    [c.name for c in configs if c.kind == "kmsg"])
        for c in configs:
            if c.kind == "journal":
                metrics.data_loss.labels(c.name, "journal_suppressed")
    return out
