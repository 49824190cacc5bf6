"""A detection carries at most ``DetectionCaps`` bytes of text, whatever the log writer wrote.

Before: a signature quoting 80 lines of 64 KiB held 5 MB per detection (20 of them took the
daemon from 55 to 168 MB). Each cut is marked in place and counted by field.
"""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry
from support.web import make_detection

from sigwatch.clock import FakeClock
from sigwatch.model import DetectionCaps, RootCause, StreamInfo, cap_detection
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.telemetry.metrics import SelfMetrics

CAPS = DetectionCaps()


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class TestCaps:
    def test_a_small_detection_is_untouched(self) -> None:
        d = make_detection()

        assert (d, {}) == cap_detection(d)

    def test_long_text_is_cut_to_the_cap_with_the_cut_marked(self) -> None:
        d = make_detection(text="é" * 10_000)  # 20,000 bytes

        capped, cut = cap_detection(d)

        assert _size(capped.text or "") <= CAPS.text
        assert capped.text.endswith(f"… [{cut['text']} bytes cut]")
        assert 20_000 == _size(capped.text.split("…")[0]) + cut["text"]
        assert capped.event_id == d.event_id

    def test_80_long_context_lines_keep_those_nearest_the_trigger(self) -> None:
        lines = tuple(f"line {n} " + "x" * 65_536 for n in range(80))
        capped, cut = cap_detection(make_detection(context=lines))

        assert sum(_size(c) for c in capped.context) <= CAPS.context + 64
        assert capped.context[-1].startswith("line 79 ")
        assert capped.context[0].startswith("… [") and "earlier lines cut" in capped.context[0]
        assert all(_size(c) <= CAPS.context_line for c in capped.context)
        kept = sum(_size(c.split("…")[0]) for c in capped.context[1:])
        assert sum(_size(c) for c in lines) == kept + cut["context"]

    def test_captures_about_facts_and_root_cause_are_capped(self) -> None:
        d = make_detection(captures=(("big", "y" * 5000), ("small", "z")),
                           about="a" * 9000, facts=(("f", "b" * 3000),),
                           root_cause=RootCause("s", "t", "r" * 9000, "/p", 1))

        capped, cut = cap_detection(d)

        assert _size(dict(capped.captures)["big"]) <= CAPS.capture
        assert "z" == dict(capped.captures)["small"]
        assert _size(capped.about) <= CAPS.about
        assert _size(dict(capped.facts)["f"]) <= CAPS.about
        assert _size(capped.root_cause.text) <= CAPS.text
        assert {"captures", "about", "text"} == set(cut)

    def test_a_cut_never_splits_a_character(self) -> None:
        capped, _ = cap_detection(make_detection(text="€" * 5000))

        assert set(capped.text.split("…")[0]) == {"€"}


def test_the_pipeline_delivers_capped_detections_and_counts_the_cut(library) -> None:
    """Every sink gets the capped detection; sigwatch_detection_bytes_cut_total counts."""
    registry = CollectorRegistry()
    got = []

    class Keep:
        name = "keep"

        def emit(self, d):  # noqa: ANN001, ANN202
            got.append(d)

        def flush(self): ...  # noqa: ANN202

        def tick(self, now): ...  # noqa: ANN001, ANN202

        def close(self): ...  # noqa: ANN202

    pipeline = Pipeline(Engine(library), [Keep()], clock=FakeClock(),
                        metrics=SelfMetrics(registry, "test"))
    d = make_detection(text="q" * 50_000)
    pipeline.emit(dataclasses.replace(d, stream_key="k"))

    assert _size(got[0].text) <= CAPS.text
    assert 0 < registry.get_sample_value("sigwatch_detection_bytes_cut_total",
                                         {"field": "text"})
    _ = StreamInfo
