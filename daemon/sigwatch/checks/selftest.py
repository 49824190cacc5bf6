"""Run every embedded example through the real framing, engine and detectors."""

from __future__ import annotations

from dataclasses import dataclass

from sigwatch.clock import FakeClock
from sigwatch.model import Detection, StreamInfo
from sigwatch.patterns.compiled import CompiledSignature, PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.scanning import scan_bytes
from sigwatch.sinks.base import CollectingSink

__all__ = ["ExampleResult", "run_example", "run_examples"]


@dataclass(frozen=True, slots=True)
class ExampleResult:
    """The outcome of one embedded example."""

    signature: str
    index: int
    kind: str
    passed: bool
    detected: tuple[str, ...]
    file: str

    @property
    def test_id(self) -> str:
        return f"{self.signature}[example-{self.index}-{self.kind}]"

    def describe(self) -> str:
        found = ", ".join(self.detected) or "nothing"
        want = "a detection" if self.kind == "match" else "no detection"
        return (f"{self.file}: examples[{self.index}] ({self.kind}): wanted {want} of "
                f"{self.signature}, got {found}")


def detect_text(engine: Engine, text: str, name: str = "example") -> list[Detection]:
    """All detections the real pipeline makes on ``text``."""
    sink = CollectingSink()
    pipeline = Pipeline(engine, [sink], clock=FakeClock())
    scan_bytes(pipeline, StreamInfo("selftest", name, name), text.encode("utf-8"))
    return sink.detections


def run_example(engine: Engine, sig: CompiledSignature, index: int) -> ExampleResult:
    """Run one example of ``sig``."""
    example = sig.examples[index]
    found = detect_text(engine, example.text, f"{sig.id}#{index}")
    ids = tuple(sorted({d.signature for d in found}))
    hit = sig.id in ids
    passed = hit if example.kind == "match" else not hit
    return ExampleResult(sig.id, index, example.kind, passed, ids, str(sig.path))


def run_examples(patterns: PatternSet, engine: Engine | None = None) -> list[ExampleResult]:
    """Every example of every signature, against the whole set (as in production)."""
    engine = engine or Engine(patterns)
    return [run_example(engine, sig, i)
            for sig in patterns.signatures for i in range(len(sig.examples))]
