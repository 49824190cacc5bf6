"""``SequenceTracker``: one-step signatures fire at once; multi-step ones walk their steps.

State is per (signature, rank) within one stream, so interleaved ranks in one file do not mix
their stack traces. The number of open sequences is capped; the oldest is dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from sigwatch.model import Match
from sigwatch.patterns.compiled import PatternSet

__all__ = ["Fired", "SequenceTracker"]

MAX_OPEN_SEQUENCES = 10_000


@dataclass(frozen=True, slots=True)
class Fired:
    """A signature whose last step just matched: ``first`` started it, ``last`` completed it."""

    signature: str
    first: Match
    last: Match
    captures: tuple[tuple[str, str], ...]
    context: tuple[str, ...]


@dataclass(slots=True)
class _Open:
    next_step: int
    last_lineno: int
    first: Match
    captures: dict[str, str]
    context: tuple[str, ...]


class SequenceTracker:
    """Per-stream step state."""

    def __init__(self, max_open: int = MAX_OPEN_SEQUENCES) -> None:
        self._open: OrderedDict[tuple[str, str | None], _Open] = OrderedDict()
        self._max_open = max_open

    def clear(self) -> None:
        """Drop every open sequence (the pattern set changed)."""
        self._open.clear()

    def earliest_open(self) -> tuple[int, int] | None:
        """(offset, line number) of the oldest line that started a still-open sequence.

        A checkpoint resumes there, so a crash between the steps does not lose the detection.
        """
        if not self._open:
            return None
        first = min((o.first.line for o in self._open.values()), key=lambda line: line.offset)
        return first.offset, first.lineno

    def feed(
        self,
        patterns: PatternSet,
        matches: list[Match],
        context_of: dict[str, tuple[str, ...]],
    ) -> list[Fired]:
        """Advance state with the matches of one line (all from the same line)."""
        fired: list[Fired] = []
        by_sig: dict[str, dict[int, Match]] = {}
        for m in matches:
            by_sig.setdefault(m.signature, {})[m.step] = m
        for sig_id, steps in by_sig.items():
            sig = patterns.get(sig_id)
            if sig is None:
                continue
            any_match = next(iter(steps.values()))
            key = (sig_id, any_match.line.rank)
            lineno = any_match.line.lineno
            state = self._open.get(key)
            if state is not None:
                step = sig.steps[state.next_step]
                if lineno - state.last_lineno > step.within_lines:
                    del self._open[key]
                    state = None
                elif state.next_step in steps:
                    m = steps[state.next_step]
                    state.captures.update(m.captures)
                    state.next_step += 1
                    state.last_lineno = lineno
                    if state.next_step == len(sig.steps):
                        del self._open[key]
                        fired.append(Fired(sig_id, state.first, m,
                                           tuple(state.captures.items()), state.context))
                    continue
            if 0 in steps:
                first = steps[0]
                context = context_of.get(sig_id, ())
                if len(sig.steps) == 1:
                    fired.append(Fired(sig_id, first, first, first.captures, context))
                    continue
                self._open[key] = _Open(1, lineno, first, dict(first.captures), context)
                self._open.move_to_end(key)
                while len(self._open) > self._max_open:
                    self._open.popitem(last=False)
        return fired
