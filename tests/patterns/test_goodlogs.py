"""The benign baseline: healthy training output makes no detection at warning or above.

The logs run as ``sigwatch scan`` runs them: every signature and every detector, the generic
layer included. A signature may record a benign line it matches as a known false positive, with
its reason; anything else fails (Sigma's goodlog test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sigwatch.app import build_detectors
from sigwatch.clock import FakeClock
from sigwatch.model import Severity, StreamInfo
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.scanning import scan_bytes
from sigwatch.sinks.base import CollectingSink

GOODLOGS = Path(__file__).resolve().parent.parent / "corpus" / "goodlogs"
LOGS = sorted(GOODLOGS.glob("*.log"))


def test_baseline_has_at_least_twenty_logs() -> None:
    """Enough healthy formats to mean something."""
    assert len(LOGS) >= 20


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_healthy_log_is_quiet(library, log: Path) -> None:
    """No detection at warning or above, except recorded known false positives."""
    sink = CollectingSink()
    clock = FakeClock()
    pipeline = Pipeline(Engine(library), [sink], clock=clock,
                        detectors=build_detectors(clock=clock))

    scan_bytes(pipeline, StreamInfo("goodlog", str(log), str(log)), log.read_bytes())

    loud = []
    for d in sink.detections:
        if d.severity < Severity.WARNING:
            continue
        sig = library.get(d.signature)
        if sig is not None and any(text in (d.text or "")
                                   for text, _reason in sig.known_false_positives):
            continue
        loud.append(f"{log.name}:{d.line}: {d.signature}: {(d.text or d.about)[:100]}")
    assert [] == loud
