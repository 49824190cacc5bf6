#!/usr/bin/env python3
"""Where `scan`'s CPU time goes, stage by stage, on one log file.

Each stage of the pipeline (the prepasses, the interest pass, the signatures' literal search,
the per-line path, every detector) is wrapped with a ``time.process_time`` counter; the scan
runs once, as `sigwatch scan` does with the built-in library and the default detectors.
Stages nest (the per-chunk total holds the per-chunk detectors), so the lines do not sum.

    .venv/bin/python bench/stages.py LOG [--no-detectors] [--no-generic]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from sigwatch.app import build_detectors, build_pipeline
from sigwatch.cli import _load_patterns, _pattern_dirs
from sigwatch.clock import SystemClock
from sigwatch.model import StreamInfo
from sigwatch.scaninputs import open_input
from sigwatch.scanning import scan_stream
from sigwatch.sinks.base import CollectingSink

__all__ = ["main"]


def _timed(spent: dict[str, float], label: str,
           func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - start
    return wrapper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--no-detectors", action="store_true")
    parser.add_argument("--no-generic", action="store_true")
    args = parser.parse_args(argv)
    patterns = _load_patterns(_pattern_dirs(argparse.Namespace(patterns=None,
                                                               add_patterns=None)))
    clock = SystemClock()
    detectors = ([] if args.no_detectors
                 else build_detectors(clock=clock, generic=not args.no_generic))
    sink = CollectingSink()
    pipeline = build_pipeline(patterns, [sink], clock=clock, detectors=detectors)
    spent: dict[str, float] = {}
    for detector in pipeline.detectors:
        name = type(detector).__name__
        if hasattr(detector, "on_chunk"):
            detector.on_chunk = _timed(spent, name, detector.on_chunk)
        if hasattr(detector, "on_line"):
            detector.on_line = _timed(  # type: ignore[method-assign]
                spent, f"{name} (per line)", detector.on_line)
    for prepass in pipeline._prepasses:
        prepass.run = _timed(  # type: ignore[method-assign]
            spent, f"prepass {type(prepass).__name__}", prepass.run)
    pipeline.interests.scan = _timed(  # type: ignore[method-assign]
        spent, "interest pass", pipeline.interests.scan)
    prefilter = pipeline.engine.prefilter
    prefilter.candidates = _timed(  # type: ignore[method-assign]
        spent, "signatures' literal search", prefilter.candidates)
    pipeline._line = _timed(spent, "per-line path", pipeline._line)  # type: ignore[method-assign]
    pipeline._chunk = _timed(  # type: ignore[method-assign]
        spent, "per-chunk detectors (all)", pipeline._chunk)
    start = time.process_time()
    reader = open_input(args.log)
    scan_stream(pipeline, StreamInfo(args.log, args.log, args.log), reader, kind="scan",
                fmt="auto")
    total = time.process_time() - start
    print(f"{total:7.2f}  CPU s reading {args.log} ({len(sink.detections)} detections)")
    for label, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"{seconds:7.2f}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
