"""``SequenceTracker``: one-step signatures fire at once; multi-step ones walk their steps.

State is per (signature, rank) within one stream, so interleaved ranks in one file do not mix
their stack traces. The number of open sequences is capped; the oldest is dropped first.

A multi-step signature that ``supersedes`` a generic one holds the generic detection made on
its first line: if the sequence completes, the generic detection is dropped (one incident, one
detection, with the specific fix); if the window passes, it is released as it was.
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
    supersedes: frozenset[str]
    window: int
    opened_at: float
    held: list[Fired]


class SequenceTracker:
    """Per-stream step state."""

    def __init__(self, max_open: int = MAX_OPEN_SEQUENCES) -> None:
        self._open: OrderedDict[tuple[str, str | None], _Open] = OrderedDict()
        self._max_open = max_open

    def retain(self, patterns: PatternSet) -> list[Fired]:
        """The pattern set changed: keep open sequences whose signature still exists with the
        same number of steps; release what the others held (returned for delivery)."""
        released: list[Fired] = []
        for key, state in list(self._open.items()):
            sig = patterns.get(key[0])
            if sig is None or len(sig.steps) <= state.next_step:
                released.extend(self._open.pop(key).held)
            else:
                state.supersedes = sig.supersedes
        return released

    def earliest_hold(self) -> float | None:
        """Monotonic time the oldest held detection started waiting (None: nothing held)."""
        times = [o.opened_at for o in self._open.values() if o.held]
        return min(times) if times else None

    def is_empty(self) -> bool:
        return not self._open

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
        now: float = 0.0,
    ) -> list[Fired]:
        """Advance state with the matches of one line (all from the same line)."""
        fired: list[Fired] = []
        opened: list[_Open] = []
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
                    fired.extend(self._open.pop(key).held)
                    state = None
                elif state.next_step in steps:
                    m = steps[state.next_step]
                    state.captures.update(m.captures)
                    state.next_step += 1
                    state.last_lineno = lineno
                    if state.next_step == len(sig.steps):
                        del self._open[key]  # completed: what it held is superseded
                        fired.append(Fired(sig_id, state.first, m,
                                           tuple(state.captures.items()), state.context))
                    else:
                        state.window = sig.steps[state.next_step].within_lines
                    continue
            if 0 in steps:
                first = steps[0]
                context = context_of.get(sig_id, ())
                if len(sig.steps) == 1:
                    fired.append(Fired(sig_id, first, first, first.captures, context))
                    continue
                previous = self._open.pop(key, None)
                if previous is not None:
                    fired.extend(previous.held)
                state = _Open(1, lineno, first, dict(first.captures), context,
                              sig.supersedes, sig.steps[1].within_lines, now, [])
                self._open[key] = state
                opened.append(state)
                while len(self._open) > self._max_open:
                    fired.extend(self._open.popitem(last=False)[1].held)
        if opened:
            fired = self._hold_superseded(fired, opened)
        if len(fired) > 1:
            # Root causes first: fallout detected on the same line (a generic traceback and the
            # specific exception it ends with) can then name them as its root cause.
            fired.sort(key=lambda f: bool(getattr(patterns.get(f.signature), "caused_by", ())))
        return fired

    @staticmethod
    def _hold_superseded(fired: list[Fired], opened: list[_Open]) -> list[Fired]:
        kept: list[Fired] = []
        for f in fired:
            holder = next((o for o in opened if f.signature in o.supersedes
                           and o.first.line.rank == f.first.line.rank
                           and f.last.line.offset == o.first.line.offset), None)
            if holder is None:
                kept.append(f)
            else:
                holder.held.append(f)
        return kept

    def expire(self, lineno: int, now: float, hold_seconds: float) -> list[Fired]:
        """Release what open sequences hold once their line window or ``hold_seconds`` passed.

        Called after each chunk and on idle streams, so a generic detection waits at most the
        window of the specific signature that may supersede it.
        """
        released: list[Fired] = []
        for key, state in list(self._open.items()):
            if not state.held:
                continue
            if lineno - state.last_lineno > state.window:  # the sequence can no longer complete
                released.extend(self._open.pop(key).held)
            elif now - state.opened_at >= hold_seconds:  # waited long enough; keep the sequence
                released.extend(state.held)
                state.held.clear()
        return released

    def release_all(self) -> list[Fired]:
        """End of input: every held detection is released."""
        released = [f for o in self._open.values() for f in o.held]
        for o in self._open.values():
            o.held.clear()
        return released

    def held_offsets(self) -> tuple[int, ...]:
        """Offsets of held detections: a checkpoint must not count them as emitted."""
        return tuple(sorted({f.last.line.offset for o in self._open.values() for f in o.held}))
