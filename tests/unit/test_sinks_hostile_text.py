"""The console and Alertmanager sinks given what a hostile log writer controls: control
characters, bidirectional overrides, a file name that is not UTF-8, and an alert that
Alertmanager refuses. Before: the console wrote ESC and U+202E to the terminal, and every post
to Alertmanager failed on encoding the path, so no later page was delivered."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from test_alertmanager_sink import Recorder, detection

from sigwatch.clock import FakeClock
from sigwatch.sinks.alertmanager import AlertmanagerSink, PostResult
from sigwatch.sinks.console import ConsoleSink, format_detection
from sigwatch.telemetry.metrics import SelfMetrics

BAD_PATH = os.fsdecode(b"/var/log/training/bad\xff.log")
HOSTILE = "a\x1b[2J b\x9b31m c\u202etxt.exe"


def _hostile(**changes: Any):  # noqa: ANN202
    return detection(0, path=BAD_PATH, text=HOSTILE, context=("ctx \x1b\x85",), **changes)


class TestConsole:
    def test_controls_overrides_and_undecodable_bytes_are_shown_escaped(self) -> None:
        out = format_detection(_hostile())

        assert [] == [c for c in ("\x1b", "\x9b", "\x85", "\u202e") if c in out]
        assert "bad\\xff.log:10" in out
        assert "a\\x1b[2J b\\x9b31m c\\u202etxt.exe" in out
        assert "ctx \\x1b\\x85" in out

    def test_the_sink_writes_to_a_strict_utf8_stream(self) -> None:
        """A daemon's stdout is strict UTF-8 when not a terminal: a surrogate would raise."""
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
        sink = ConsoleSink(stream, colour=False)

        sink.emit(_hostile())
        sink.flush()

        assert b"bad\\xff.log" in raw.getvalue()


class Refuses(Recorder):
    """Alertmanager answering 400 to any batch holding the poison signature."""

    def __call__(self, url: str, body: bytes, timeout: float) -> PostResult:
        result = super().__call__(url, body, timeout)
        if any(a["labels"]["signature"] == "poison" for a in self.posts[-1][1]):
            return PostResult(False, "rejected", "HTTP 400: bad alert")
        return result


class TestAlertmanager:
    def test_a_non_utf8_path_is_posted_escaped(self, tmp_path: Path) -> None:
        posts = Recorder()
        sink = AlertmanagerSink(["http://am:9093"], node="n7", clock=FakeClock(1.7e9),
                                transport=posts, state_path=tmp_path / "alerts.json")

        sink.emit(_hostile())
        sink.flush()

        [alert] = posts.posts[-1][1]
        assert "/var/log/training/bad\\xff.log:10 (rank 0)" == alert["annotations"]["where"]
        assert "a\\x1b[2J b\\x9b31m c\\u202etxt.exe" == alert["annotations"]["line"]
        assert 1 == len(json.loads((tmp_path / "alerts.json").read_bytes())["alerts"])
        assert 0 == sink.undelivered()

    def test_an_alert_refused_alone_is_dropped_and_the_others_delivered(self) -> None:
        registry = CollectorRegistry()
        posts = Refuses()
        sink = AlertmanagerSink(["http://am:9093"], node="n7", clock=FakeClock(1.7e9),
                                transport=posts, metrics=SelfMetrics(registry, "test"))

        sink.emit(detection(0, signature="poison"))
        sink.emit(detection(1, signature="after_it"))
        sink.flush()

        assert ["after_it"] == [a["labels"]["signature"] for a in posts.posts[-1][1]]
        assert 0 == sink.undelivered()
        assert 1 == registry.get_sample_value("sigwatch_alerts_dropped_total",
                                              {"reason": "rejected"})

    def test_an_alert_that_cannot_be_encoded_does_not_block_the_others(self) -> None:
        """Defence in depth: whatever an alert holds, the rest of the set still goes out."""
        registry = CollectorRegistry()
        posts = Recorder()
        sink = AlertmanagerSink(["http://am:9093"], node="n7", clock=FakeClock(1.7e9),
                                transport=posts, metrics=SelfMetrics(registry, "test"))
        sink.emit(detection(0, signature="poison"))
        sink.emit(detection(1, signature="after_it"))
        poison = next(a for a in sink._alerts.values() if a.labels["signature"] == "poison")
        poison.annotations["line"] = "\ud800 lone surrogate"

        sink.flush()

        assert ["after_it"] == [a["labels"]["signature"] for a in posts.posts[-1][1]]
        assert 1 == registry.get_sample_value("sigwatch_alerts_dropped_total",
                                              {"reason": "unencodable"})
