"""Root cause over fallout: a detection names the earlier one it is collateral of.

A signature's ``[collateral] caused_by`` lists the signatures whose recent detection on the same
source, in the same job, explains it (SIGTERM fan-out after an uncorrectable ECC error, Xid 45
after Xid 79). The fallout then carries ``root_cause`` and, when the signature says so, a lower
severity. A cause in another job never explains a job's failure (two jobs on one node, or a job
restarted after the last one failed).
"""

from __future__ import annotations

import dataclasses

from sigwatch.model import Detection, RootCause
from sigwatch.patterns.compiled import PatternSet

__all__ = ["RootCauseCorrelator"]


class RootCauseCorrelator:
    """Remembers the latest detection per (source, job, signature) and annotates fallout."""

    name = "root_cause"

    def __init__(self, patterns: PatternSet) -> None:
        self.patterns = patterns
        self._recent: dict[tuple[str, str, str], Detection] = {}

    def swap(self, patterns: PatternSet) -> None:
        self.patterns = patterns

    def refine(self, d: Detection) -> Detection:
        """``d`` with its root cause (if a recent cause exists), remembered for later ones."""
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
                root = RootCause(best.signature, best.title, best.text or best.about,
                                 best.path, best.offset if best.offset is not None else -1)
                d = dataclasses.replace(d, root_cause=root,
                                        severity=sig.collateral_severity or d.severity)
        self._recent[(d.source, d.job, d.signature)] = d
        return d
