"""Compiled, immutable signatures. Built once per load and swapped whole on reload."""

from __future__ import annotations

import re
import re._constants as sre_c
import re._parser as sre_parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from sigwatch.model import Remediation, Severity

__all__ = [
    "CompiledSignature",
    "CompiledStep",
    "Example",
    "PatternSet",
    "derive_keywords",
]

MIN_KEYWORD_CHARS = 3


@dataclass(frozen=True, slots=True)
class CompiledStep:
    """One step: a compiled regex and the literals a line must hold for it to be tried.

    ``keywords`` empty means the step has no prefilter and its regex runs on every line.
    """

    pattern: regex.Pattern[str]
    source: str
    keywords: tuple[str, ...]
    within_lines: int
    keywords_derived: bool
    # A cheap, case-sensitive ``re`` pattern every line of this step also matches (fail2ban's
    # ``prefregex``): the prefilter searches it when the step has no usable literal anchor.
    prefregex: str | None = None


@dataclass(frozen=True, slots=True)
class Example:
    """An embedded example from the signature file."""

    kind: str
    text: str
    note: str


@dataclass(frozen=True, slots=True)
class CompiledSignature:
    """Everything the engine and detectors need, compiled."""

    id: str
    title: str
    severity: Severity
    status: str
    description: str
    steps: tuple[CompiledStep, ...]
    context_before: int
    context_include: tuple[regex.Pattern[str], ...]
    remediation: Remediation
    labels: tuple[tuple[str, str], ...]
    supersedes: frozenset[str]
    caused_by: tuple[str, ...]
    collateral_window: float
    collateral_severity: Severity | None
    incidents: tuple[str, ...]
    references: tuple[str, ...]
    falsepositives: tuple[str, ...]
    examples: tuple[Example, ...]
    known_false_positives: tuple[tuple[str, str], ...]
    path: Path
    raw: Any  # the validated SignatureFile, for lint and `patterns show`
    sources: frozenset[str] = frozenset({"any"})  # stream kinds it applies to (kinds.applies)
    once_per_stream: bool = False
    owner: str = "unknown"  # user | node | fabric | unknown (whose fault it is)
    event_lines: int = 0  # matches this close together are one event (one detection)
    event_end: regex.Pattern[str] | None = None  # the line that ends such an event
    # The keys its file's [policy] table sets (sigwatch.faults.policy merges them).
    policy: tuple[tuple[str, Any], ...] = ()

    @property
    def action(self) -> str:
        return self.remediation.action


@dataclass(frozen=True)
class PatternSet:
    """The active signatures, in a stable order (by id)."""

    signatures: tuple[CompiledSignature, ...]
    sources: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {s.id: s for s in self.signatures})

    def get(self, sig_id: str) -> CompiledSignature | None:
        by_id: dict[str, CompiledSignature] = self._by_id  # type: ignore[attr-defined]
        return by_id.get(sig_id)

    def __len__(self) -> int:
        return len(self.signatures)


# --- keyword derivation -------------------------------------------------------------------

def derive_keywords(pattern: str) -> tuple[str, ...]:
    """Literals of which at least one must occur in any line the regex matches.

    Uses the standard library's regex parser; a pattern it cannot parse, a case-insensitive
    pattern, or one with no literal of three or more characters gets none (it then runs on
    every line, which is correct but slow).
    """
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError):
        return ()
    if parsed.state.flags & re.IGNORECASE:
        return ()
    found = _sequence_literals(list(parsed))
    return found or ()


def _score(alternatives: tuple[str, ...]) -> tuple[int, int]:
    return (min(len(a) for a in alternatives), -len(alternatives))


def _sequence_literals(items: list[Any]) -> tuple[str, ...] | None:
    candidates: list[tuple[str, ...]] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) >= MIN_KEYWORD_CHARS:
            candidates.append(("".join(run),))
        run.clear()

    for op, av in items:
        if op is sre_c.LITERAL:
            run.append(chr(av))
            continue
        flush()
        sub: tuple[str, ...] | None = None
        if op is sre_c.SUBPATTERN:
            _group, add_flags, _del_flags, body = av
            if not add_flags & re.IGNORECASE:
                sub = _sequence_literals(list(body))
        elif op is sre_c.BRANCH:
            alts: list[str] = []
            for branch in av[1]:
                found = _sequence_literals(list(branch))
                if not found:
                    alts = []
                    break
                alts.extend(found)
            sub = tuple(dict.fromkeys(alts)) or None
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT):
            low, _high, body = av
            if low >= 1:
                sub = _sequence_literals(list(body))
        elif op is sre_c.ATOMIC_GROUP:
            sub = _sequence_literals(list(av))
        if sub:
            candidates.append(sub)
    flush()
    if not candidates:
        return None
    return max(candidates, key=_score)
