"""Root cause over fallout: a detection names the earlier one it is collateral of.

A signature's ``[collateral] caused_by`` lists the signatures whose recent detection on the same
source, in the same job, explains it (SIGTERM fan-out after an uncorrectable ECC error, Xid 45
after Xid 79). The fallout then carries ``root_cause`` and, when the signature says so, a lower
severity. A cause in another job never explains a job's failure (two jobs on one node, or a job
restarted after the last one failed).

The generic layer (``detectors/generic``) ranks below every specific signature: a signature's
detection on the same line folds a generic detection away (or, for a shape that says more than
the line, such as a traceback naming the user's frame, makes it fallout); a specific signature
detected earlier on the source, in the same job, within ``GENERIC_WINDOW`` seconds becomes its
root cause and lowers it to a warning.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, deque

from sigwatch.detectors.generic import SHAPES
from sigwatch.model import Detection, RootCause, Severity
from sigwatch.patterns.compiled import PatternSet

__all__ = ["GENERIC_WINDOW", "RootCauseCorrelator"]

GENERIC_WINDOW = 300.0
"""Seconds within which a specific detection is the root cause of a generic one."""

_MAX_LINES = 4096
_PER_SOURCE = 16


class RootCauseCorrelator:
    """Remembers the latest detection per (source, job, signature) and annotates fallout."""

    name = "root_cause"

    def __init__(self, patterns: PatternSet) -> None:
        self.patterns = patterns
        self._recent: dict[tuple[str, str, str], Detection] = {}
        # Signature detections by line (stream key, offset) -> signature, for the same-line rule;
        # and the latest specific ones per source and job, for the generic layer's root cause.
        self._lines: OrderedDict[tuple[str, int], Detection] = OrderedDict()
        self._specific: dict[tuple[str, str], deque[Detection]] = {}

    def swap(self, patterns: PatternSet) -> None:
        self.patterns = patterns

    def refine(self, d: Detection) -> Detection | None:
        """``d`` with its root cause (if a recent cause exists), remembered for later ones;
        None when a generic detection folds into a signature's on the same line."""
        sig = self.patterns.get(d.signature)
        if sig is not None and sig.caused_by:
            best: Detection | None = None
            for cause in sig.caused_by:
                prior = self._recent.get((d.source, d.job, cause))
                if prior is None or d.time - prior.time > sig.collateral_window:
                    continue
                if best is None or prior.time >= best.time:
                    best = prior
            if best is not None:
                d = dataclasses.replace(d, root_cause=_root(best),
                                        severity=sig.collateral_severity or d.severity)
        if sig is not None:
            self._remember_signature(d, specific=not sig.caused_by)
        else:
            shape = dict(d.labels).get("shape") if ("layer", "generic") in d.labels else None
            if shape is not None:
                generic = self._rank_generic(d, SHAPES.get(shape, "fold"))
                if generic is None:
                    return None
                d = generic
        self._recent[(d.source, d.job, d.signature)] = d
        return d

    def _remember_signature(self, d: Detection, *, specific: bool) -> None:
        if d.offset is not None:
            self._lines[(d.stream_key, d.offset)] = d
            self._lines.move_to_end((d.stream_key, d.offset))
            while len(self._lines) > _MAX_LINES:
                self._lines.popitem(last=False)
        if specific and d.severity >= Severity.WARNING:
            self._specific.setdefault((d.source, d.job),
                                      deque(maxlen=_PER_SOURCE)).append(d)

    def _rank_generic(self, d: Detection, same_line: str) -> Detection | None:
        cause = self._lines.get((d.stream_key, d.offset)) if d.offset is not None else None
        if cause is not None and same_line == "fold":
            return None
        if cause is None:
            for prior in reversed(self._specific.get((d.source, d.job), ())):
                if d.time - prior.time > GENERIC_WINDOW:
                    break
                if (prior.stream_key == d.stream_key and prior.offset is not None
                        and d.offset is not None and prior.offset > d.offset):
                    continue  # later on the same stream: not what led to this line
                cause = prior
                break
        if cause is None:
            return d
        return dataclasses.replace(d, root_cause=_root(cause),
                                   severity=min(d.severity, Severity.WARNING))


def _root(cause: Detection) -> RootCause:
    return RootCause(cause.signature, cause.title, cause.text or cause.about, cause.path,
                     cause.offset if cause.offset is not None else -1)
