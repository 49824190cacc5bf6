"""One node's pipeline with job identity, the job book and incident folding, driven by hand.

``FleetNode`` opens streams (a rank log, the kernel log), writes lines to them (optionally with
the time a kmsg record carries), closes them and lets time pass on a ``FakeClock``; it keeps
what reaches the sinks apart (every occurrence, and what the console and pager get) and reads
the job gauges from a real registry, as Prometheus would scrape them.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from sigwatch.clock import FakeClock
from sigwatch.detectors.folding import Folder
from sigwatch.detectors.jobs import JobBook, JobLimits
from sigwatch.detectors.ranks import RankFactsDetector
from sigwatch.detectors.training import ProgressReader
from sigwatch.framing.lines import Segment
from sigwatch.framing.records import one_line
from sigwatch.model import Detection, StreamInfo
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sinks.metrics import MetricsSink
from sigwatch.sources.base import StreamOpened
from sigwatch.sources.identity import JobIdentity, PathLabels, identify
from sigwatch.telemetry.metrics import JobCollector, SelfMetrics

__all__ = ["KERNEL_XID", "NCCL_TIMEOUT", "FleetNode", "write_signatures"]

KERNEL_XID = """
id = "test_xid_79"
title = "GPU Fallen Off The Bus"
severity = "critical"
owner = "node"
sources = ["kernel"]
[match]
regex = 'NVRM: Xid \\(PCI:(?P<pci>[0-9a-f:.]+)\\): 79,'
keywords = ["Xid"]
[remediation]
summary = "Drain the node and reset or replace the GPU."
"""

NCCL_TIMEOUT = """
id = "test_nccl_timeout"
title = "NCCL Watchdog Timeout"
severity = "error"
owner = "unknown"
[match]
regex = 'Watchdog caught collective operation timeout'
keywords = ["Watchdog caught"]
[remediation]
summary = "A rank stopped entering collectives: find the first fault of the job."
"""

USER_EXCEPTION = """
id = "test_user_exception"
title = "Python Exception"
severity = "error"
owner = "user"
[match]
regex = 'ZeroDivisionError: (?P<what>.+)'
keywords = ["ZeroDivisionError"]
[remediation]
summary = "Fix the training code."
"""

CHILD_FAILED = """
id = "test_child_failed"
title = "Worker Exited With Code 1"
severity = "error"
owner = "unknown"
[match]
regex = 'ChildFailedError'
keywords = ["ChildFailedError"]
[collateral]
caused_by = ["test_user_exception"]
within_seconds = 300
severity = "warning"
"""

RANK_LOGS = r"/training/(?P<job>[^/]+)/rank(?P<rank>\d+)\.log$"


class _EveryOccurrence(CollectingSink):
    name = "every"
    every_occurrence = True


def write_signatures(root: Path) -> Path:
    folder = root / "patterns"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("test_xid_79", KERNEL_XID), ("test_nccl_timeout", NCCL_TIMEOUT),
                       ("test_user_exception", USER_EXCEPTION),
                       ("test_child_failed", CHILD_FAILED)):
        (folder / f"{name}.toml").write_text(text, encoding="utf-8")
    return folder


class FleetNode:
    """A pipeline as ``build_daemon`` wires it, minus files and threads."""

    def __init__(self, root: Path, *, node: str = "gpu-node-7", idle: float = 3600.0,
                 fold: bool = True, limits: JobLimits | None = None,
                 clock: FakeClock | None = None) -> None:
        patterns, errors = load_patterns([write_signatures(root)])
        assert [] == errors
        self.clock = clock or FakeClock(1_700_000_000.0)
        self.registry = CollectorRegistry()
        self.metrics = SelfMetrics(self.registry, "test")
        self.book = JobBook(idle=idle, limits=limits,
                            on_refused=lambda w: self.metrics.job_series_refused.labels(w).inc())
        self.registry.register(JobCollector(node, self.book.rows))
        self.every = _EveryOccurrence()
        self.paged = CollectingSink()  # what the console, status page and pager get
        labels = PathLabels(RANK_LOGS)

        def who(info: StreamInfo) -> JobIdentity | None:
            return identify(info.path, labels) if info.source == "training" else None

        self.pipeline = Pipeline(
            Engine(patterns), [MetricsSink(self.metrics), self.every, self.paged],
            clock=self.clock, metrics=self.metrics, host=node,
            detectors=[RankFactsDetector(self.clock, book=self.book, reader=ProgressReader())],
            content={"kernel": "kernel", "training": "job"}, identify=who, jobs=self.book,
            folder=Folder() if fold else None)
        self.node = node
        self._offsets: dict[int, int] = {}

    # -- streams -------------------------------------------------------------------------------

    def open(self, path: str, source: str = "training") -> int:
        handle = self.pipeline.new_handle()
        kind = "kmsg" if source == "kernel" else "file"
        self.pipeline.open(StreamOpened(handle, StreamInfo(source, path, f"key:{path}"),
                                        kind=kind))
        self._offsets[handle] = 0
        return handle

    def write(self, handle: int, *lines: str, time: float | None = None) -> list[Detection]:
        """Whole lines (as one segment each, with ``time`` as a kmsg record carries it)."""
        segments = []
        for text in lines:
            data = text.encode()
            start = self._offsets[handle]
            self._offsets[handle] = start + len(data) + 1
            segments.append(one_line(data, start, start + len(data) + 1, time))
        return self.pipeline.process(handle, segments)

    def write_block(self, handle: int, *lines: str) -> list[Detection]:
        """Whole lines as one segment, as a file read hands them over (one chunk)."""
        data = "".join(f"{text}\n" for text in lines).encode()
        start = self._offsets[handle]
        self._offsets[handle] = start + len(data)
        return self.pipeline.process(handle, [Segment(data, start, start + len(data))])

    def close(self, handle: int) -> list[Detection]:
        return self.pipeline.finish(handle)

    def advance(self, seconds: float) -> list[Detection]:
        self.clock.advance(seconds)
        return self.pipeline.tick()

    # -- what Prometheus would scrape ----------------------------------------------------------

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, {"node": self.node, **labels})

    def series(self, name: str) -> list[dict[str, str]]:
        return [dict(s.labels) for f in self.registry.collect() for s in f.samples
                if s.name == name]
