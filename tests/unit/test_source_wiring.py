"""Wiring of the sources: config kinds, signature kinds per stream, line times, handles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from sigwatch.clock import FakeClock
from sigwatch.config import load_config
from sigwatch.detectors.base import LineEvent, StreamContext
from sigwatch.errors import ConfigError
from sigwatch.framing.lines import Segment
from sigwatch.framing.records import TimedSegment
from sigwatch.model import Detection, StreamInfo
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened

KERNEL_ONLY = """
id = "xid_kernel"
title = "Xid Kernel"
severity = "error"
sources = ["kernel"]
[match]
regex = 'NVRM: Xid \\(PCI:[^)]*\\): (?P<xid>\\d+)'
"""
XID = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"


class _Times:
    """A detector that records the time of every matched line it is shown."""

    name = "times"
    interest = None

    def __init__(self) -> None:
        self.times: list[float | None] = []

    def on_open(self, stream: StreamContext) -> None:
        _ = stream

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        if event.matches:
            self.times.append(event.line.time)
        return ()

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        _ = (stream, clean)
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        _ = now
        return ()

    def next_deadline(self) -> float | None:
        return None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        _ = handle
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        _ = handle
        return ()

    def snapshot(self) -> object:
        return None

    def restore(self, state: object) -> None:
        _ = state


def _run(root: Path, kind: str, segments: list[Segment],
         content: dict[str, str] | None = None) -> tuple[list[Detection], list[float | None]]:
    patterns, errors = load_patterns([root])
    assert not errors
    sink = CollectingSink()
    times = _Times()
    pipeline = Pipeline(Engine(patterns), [sink], clock=FakeClock(), detectors=[times],
                        content=content)
    pipeline.open(StreamOpened(1, StreamInfo("src", "p", "k"), kind=kind))
    pipeline.process(1, segments)
    return sink.detections, times.times


class TestSignatureKinds:
    @pytest.mark.parametrize(("kind", "content", "fires"), [
        ("file", None, False), ("kmsg", None, True), ("journal", None, True),
        ("file", {"src": "kernel"}, True), ("kmsg", {"src": "job"}, False),
        ("scan", None, True)],
        ids=["job-log-quoting-it", "kmsg", "unfiltered-journal", "kern.log-by-config",
             "overridden-to-job", "scan-is-mixed"])
    def test_a_kernel_only_signature_fires_on_kernel_streams_only(
            self, write_pattern: Callable[[str, str], Path], kind: str,
            content: dict[str, str] | None, fires: bool) -> None:
        root = write_pattern("xid_kernel", KERNEL_ONLY)

        found, _times = _run(root, kind, [Segment(XID, 0, len(XID))], content)

        assert fires == bool(found)


class TestLineTime:
    def test_the_time_a_source_gives_is_the_lines_time(
            self, write_pattern: Callable[[str, str], Path]) -> None:
        root = write_pattern("xid_kernel", KERNEL_ONLY)

        _found, times = _run(root, "kmsg", [TimedSegment(XID, 7, 8, time=1234.5)])

        assert [1234.5] == times

    def test_a_candidate_lines_own_timestamp_is_parsed(
            self, write_pattern: Callable[[str, str], Path]) -> None:
        root = write_pattern("xid_kernel", KERNEL_ONLY)
        line = b"2024-11-20T10:02:11Z " + XID

        _found, times = _run(root, "kmsg", [Segment(line, 0, len(line))])

        assert [1732096931.0] == times


class TestConfig:
    def test_every_kind_of_source_is_accepted(self, tmp_path: Path) -> None:
        path = tmp_path / "c.toml"
        path.write_text("""
[[sources]]
name = "pods"
paths = ["/var/log/pods/*/*/*.log"]
format = "auto"
[[sources]]
name = "kernel"
kind = "kmsg"
lookback_seconds = 600
[[sources]]
name = "units"
kind = "journal"
units = ["train.service"]
[[sources]]
name = "jobpipe"
kind = "pipe"
paths = ["/run/sigwatch/job.fifo"]
[[sources]]
name = "kern"
paths = ["/var/log/kern.log"]
content = "kernel"
""")

        config = load_config(path)

        assert ["files", "kmsg", "journal", "pipe", "files"] == [s.kind for s in config.sources]

    @pytest.mark.parametrize("text", [
        '[[sources]]\nname = "a"\nkind = "files"\n',
        '[[sources]]\nname = "a"\nkind = "kmsg"\nunits = ["x.service"]\n',
        '[[sources]]\nname = "a"\nkind = "journal"\nformat = "cri"\n',
        '[[sources]]\nname = "a"\nkind = "pipe"\npaths = ["/a", "/b"]\n'],
        ids=["files-without-paths", "units-on-kmsg", "format-on-journal", "two-pipes"])
    def test_options_that_do_not_fit_the_kind_are_errors(self, tmp_path: Path,
                                                         text: str) -> None:
        path = tmp_path / "c.toml"
        path.write_text(text)

        with pytest.raises(ConfigError):
            load_config(path)
