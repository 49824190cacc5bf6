"""Literal prefilter: find the few lines worth running a regex on.

All keyword literals of all steps go into one byte-level alternation that is searched over
whole chunks, so lines holding no keyword cost no Python work at all. Lines holding an ESC byte
are always candidates, because an ANSI code could sit inside a keyword.
"""

from __future__ import annotations

import re
from collections import defaultdict

from sigwatch.patterns.compiled import PatternSet

__all__ = ["Prefilter", "StepRef"]

StepRef = tuple[int, int]  # (signature index in the set, step index)


class Prefilter:
    """Keyword index over one PatternSet."""

    def __init__(self, patterns: PatternSet) -> None:
        by_keyword: dict[str, set[StepRef]] = defaultdict(set)
        unfiltered: list[StepRef] = []
        for sig_index, sig in enumerate(patterns.signatures):
            for step_index, step in enumerate(sig.steps):
                if not step.keywords:
                    unfiltered.append((sig_index, step_index))
                for keyword in step.keywords:
                    by_keyword[keyword].add((sig_index, step_index))
        self.unfiltered: tuple[StepRef, ...] = tuple(unfiltered)
        self.keywords: tuple[tuple[str, frozenset[StepRef]], ...] = tuple(
            (k, frozenset(v)) for k, v in sorted(by_keyword.items()))
        literals = sorted((k.encode() for k in by_keyword), key=len, reverse=True)
        alternatives = [re.escape(k) for k in literals] + [b"\x1b"]
        self._bytes_re = re.compile(b"|".join(alternatives))

    @property
    def filters_everything(self) -> bool:
        """True when every step has keywords, so non-candidate lines can be skipped."""
        return not self.unfiltered

    def search(self, data: bytes, pos: int) -> re.Match[bytes] | None:
        """The next place in ``data`` at or after ``pos`` where a candidate line may be."""
        return self._bytes_re.search(data, pos)

    def steps_for(self, text: str) -> list[StepRef]:
        """Every step whose keywords occur in ``text`` (plus the unfiltered ones), in order."""
        found: set[StepRef] = set(self.unfiltered)
        for keyword, refs in self.keywords:
            if keyword in text:
                found.update(refs)
        return sorted(found)
