"""The exactly-once model test, for a source whose positions are record numbers.

The same runtime, pipeline, event log and checkpoint as for files, with ``ListSource`` (an
append-only list of records, like the journal or kmsg) instead of the file source. Random
sequences of appends, two-step sequences (an ``OPEN`` then a ``CLOSE`` a few records later, so
restarts land inside open sequences and the source must resume at the detector's replay
floor), passes, restarts and crashes (SIGKILL between two passes: nothing more is flushed or
committed). Nothing is ever destroyed here, so the check is strict: every record and every
sequence is detected exactly once, and never twice at any step.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from harness import Harness, duplicates
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from support.listsource import ListSource

PAIR_SIGNATURE = """\
id = "test_open_close"
title = "Test Open Close"
severity = "error"
[match]
regex = 'OPEN seq=(?P<seq>\\d+)'
[[match.then]]
regex = 'CLOSE'
within_lines = 5000  # more than a whole example writes
"""


class IntegerSourceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="sigwatch-intsrc-"))
        self.records: list[bytes] = []
        self.written: list[int] = []
        self.h: Harness | None = None
        self.opened_at: int | None = None

    @initialize()
    def start(self) -> None:
        self.h = Harness(self.tmp, source_factory=lambda _c, _m: ListSource(self.records))
        (self.h.patterns / "test" / "test_open_close.toml").write_text(PAIR_SIGNATURE)
        self.h.start()

    @rule(count=st.integers(1, 8), noise=st.integers(0, 3))
    def append(self, count: int, noise: int) -> None:
        for _ in range(count):
            seq = len(self.written) + 1
            self.written.append(seq)
            self.records.append(f"ERROR seq={seq}".encode())
            self.records.extend(b"INFO nothing to see" for _ in range(noise))

    @precondition(lambda self: self.opened_at is None)
    @rule()
    def open_sequence(self) -> None:
        """The first step; appends and passes may come before the second."""
        seq = 1_000_000 + len(self.written)
        self.written.append(seq)
        self.opened_at = len(self.records)
        self.records.append(f"OPEN seq={seq}".encode())

    @precondition(lambda self: self.opened_at is not None)
    @rule()
    def close_sequence(self) -> None:
        self.records.append(b"CLOSE")
        self.opened_at = None

    @rule(passes=st.integers(1, 4))
    def tick(self, passes: int) -> None:
        assert self.h is not None
        for _ in range(passes):
            self.h.tick()

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        assert self.h is not None
        self.h.restart(crash=crash)

    @invariant()
    def never_twice(self) -> None:
        if self.h is not None:
            assert {} == duplicates(self.h.seqs())

    def teardown(self) -> None:
        try:
            if self.h is None:
                return
            if self.opened_at is not None:
                self.close_sequence()
            self.h.pump()
            self.h.restart()
            self.h.pump()
            got = self.h.seqs()
            assert {} == duplicates(got)
            assert sorted(self.written) == sorted(got)
            self.h.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


IntegerSourceMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_integer_position_source_is_exactly_once = pytest.mark.slow(IntegerSourceMachine.TestCase)
