"""``Matcher``: runs the candidate steps' regexes on one line, each call bounded by a timeout."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sigwatch.engine.prefilter import Prefilter, StepRef
from sigwatch.model import LogLine, Match
from sigwatch.patterns.compiled import PatternSet

__all__ = ["DEFAULT_REGEX_TIMEOUT", "Matcher"]

DEFAULT_REGEX_TIMEOUT = 0.05
RETRY_FACTOR = 10


def _ignore(_signature: str) -> None:
    return None


class Matcher:
    """Compiled at construction, pure afterwards: no I/O and no globals."""

    def __init__(
        self,
        patterns: PatternSet,
        *,
        timeout: float = DEFAULT_REGEX_TIMEOUT,
        on_timeout: Callable[[str], None] = _ignore,
        prefilter: str | None = None,
    ) -> None:
        self.patterns = patterns
        self.prefilter = Prefilter(patterns, prefilter)
        self.timeout = timeout
        self._on_timeout = on_timeout

    def match(self, line: LogLine, steps: Sequence[StepRef] | None = None) -> list[Match]:
        """Steps that match ``line``, in (signature, step) order.

        ``steps`` (sorted) are the only ones tried: the prefilter's candidates for the line.
        Without it every step of every signature is tried.
        """
        out: list[Match] = []
        signatures = self.patterns.signatures
        for sig_index, step_index in (self.prefilter.all_steps if steps is None else steps):
            sig = signatures[sig_index]
            step = sig.steps[step_index]
            started = time.thread_time()
            try:
                m = step.pattern.search(line.text, timeout=self.timeout)
            except TimeoutError:
                # The bound is wall time: a thread that was merely descheduled (the GIL held
                # by the inotify thread during a storm of new files) gets one longer try, so a
                # busy machine does not cost a real detection.
                if time.thread_time() - started >= self.timeout / 2:
                    self._on_timeout(sig.id)
                    continue
                try:
                    m = step.pattern.search(line.text, timeout=self.timeout * RETRY_FACTOR)
                except TimeoutError:
                    self._on_timeout(sig.id)
                    continue
            if m is None:
                continue
            captures = tuple((k, v) for k, v in m.groupdict().items() if v is not None)
            out.append(Match(sig.id, step_index, line, captures))
        return out
