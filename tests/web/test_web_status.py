"""What the runtime hands the web side: liveness and a status provider over the metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from support.web import make_detection

from sigwatch.clock import FakeClock
from sigwatch.telemetry.metrics import SelfMetrics
from sigwatch.web.status import Liveness, RegistryStatus, SourceStatus, signature_infos


def test_registry_status_reports_what_the_metrics_say() -> None:
    """Lines, bytes, streams and errors (all reasons) per source, from the catalogue's series;
    lag and last read from the runtime's progress callback."""
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry, "test")
    metrics.declare_sources(["training", "kernel"])
    metrics.lines.labels("training").inc(120)
    metrics.bytes_read.labels("training").inc(4096)
    metrics.files_watched.labels("training").set(3)
    metrics.file_errors.labels("training", "permission").inc(2)
    metrics.file_errors.labels("training", "vanished").inc()
    status = RegistryStatus(
        registry, [("training", "file"), ("kernel", "kmsg")], signatures=list,
        progress=lambda name: (512.0, "bytes", 1_700_000_000.0) if name == "training"
        else (None, "none", None))

    assert [
        SourceStatus("training", "file", 3, 120, 4096, 512.0, "bytes", 1_700_000_000.0, 3),
        SourceStatus("kernel", "kmsg", 0, 0, 0, None, "none", None, 0),
    ] == list(status.sources())


def test_registry_status_passes_signatures_and_open_incidents_through(library) -> None:
    """The composition root supplies the loaded signatures and open incidents as callables."""
    stall = make_detection(0, about="stalled", offset=None, line=None, text=None, key="k")
    status = RegistryStatus(CollectorRegistry(), [],
                            signatures=lambda: signature_infos(library.signatures),
                            open_incidents=lambda: [stall])

    assert len(library.signatures) == len(status.signatures())
    assert [stall] == list(status.open_incidents())


def test_liveness_follows_the_beat_on_the_injected_clock() -> None:
    """Healthy within max_silence of the last beat, unhealthy after; ready is explicit."""
    clock = FakeClock()
    live = Liveness(clock, max_silence=10)
    before = live.healthy()
    live.beat()
    clock.advance(10)
    at_limit = live.healthy()
    clock.advance(0.5)

    assert (False, True, False) == (before, at_limit, live.healthy())
    assert (False, "starting") == (live.ready, live.not_ready_reason)
    live.set_ready()
    assert live.ready
