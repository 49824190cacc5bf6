"""The fault engine's decisions and lifecycle, driven with a fake clock and a fake boot id.

Slurm itself is exercised for real in ``tests/integration/slurm``; here the engine runs in
observe mode or without a scheduler, which is enough to pin every decision and transition.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sigwatch.clock import FakeClock
from sigwatch.faults.boot import BootInfo
from sigwatch.faults.engine import FaultEngine
from sigwatch.faults.model import Decision
from sigwatch.faults.policy import Policy
from sigwatch.faults.settings import PolicySettings
from sigwatch.faults.store import FaultStore
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import load_patterns

DAY = 86400.0


class FakeBoot:
    """A boot id that changes when told to (a simulated reboot)."""

    def __init__(self, started: float | None = None) -> None:
        self.id = "boot-1"
        self.started = started
        self.count = 1

    def current(self) -> BootInfo:
        return BootInfo(self.id, self.started)

    def reboot(self, started: float | None = None) -> None:
        self.count += 1
        self.id = f"boot-{self.count}"
        self.started = started


def detection(signature: str = "nvidia_xid_79_fallen_off_bus", *, offset: int = 100,
              line_time: float | None = None, owner: str = "node",
              severity: Severity = Severity.CRITICAL, read_at: float = 0.0) -> Detection:
    return Detection(
        signature=signature, title=signature.replace("_", " ").title(), severity=severity,
        status="stable", source="kernel", path="/var/log/kern.log", stream_key="dev:ino:kern",
        line=offset // 100, offset=offset, text=f"NVRM: Xid ... ({offset})", time=read_at,
        remediation=Remediation(summary="Xid 79: the GPU fell off the bus; reboot."),
        owner=owner, line_time=line_time)


class Harness:
    """An engine over a state folder, with everything it decided."""

    def __init__(self, tmp_path: Path, library: PatternSet, *, mode: str = "observe",
                 settings: dict[str, Any] | None = None, boot: FakeBoot | None = None,
                 clock: FakeClock | None = None) -> None:
        self.tmp_path = tmp_path
        self.library = library
        self.clock = clock or FakeClock(1_800_000_000.0)
        self.boot = boot or FakeBoot()
        self.settings = PolicySettings.model_validate(
            {"mode": mode, "clean_window_seconds": 600, **(settings or {})})
        self.decisions: list[Decision] = []
        self.notices: list[Detection] = []
        self.engine = self._engine()

    def _engine(self) -> FaultEngine:
        engine = FaultEngine(Policy(self.settings), clock=self.clock,
                             store=FaultStore(self.tmp_path / "state", fsync=False),
                             boot=self.boot, signatures=lambda: self.library,
                             notify=self.notices.append)  # type: ignore[arg-type]
        engine.on_decision = self.decisions.append
        return engine

    def restart(self) -> None:
        self.engine.close()
        self.engine = self._engine()

    def see(self, d: Detection) -> Decision:
        """The line is read now, or when it was written if that is later (no time travel)."""
        if d.line_time is not None and d.line_time > self.clock.time():
            self.clock.advance(d.line_time - self.clock.time())
        d = dataclasses.replace(d, time=d.time or self.clock.time())
        self.engine.emit(d)
        return self.decisions[-1]

    def tick(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.engine.tick(self.clock.time())

    def only(self) -> Any:
        [fault] = self.engine.faults()
        return fault


@pytest.fixture(name="harness")
def _harness(tmp_path: Path, library: PatternSet) -> Any:
    def make(**kw: Any) -> Harness:
        return Harness(tmp_path, library, **kw)
    return make


class TestDecisions:
    def test_a_node_owned_critical_line_opens_a_fault_and_its_repeat_folds(
            self, harness: Any) -> None:
        """Default policy: node-owned critical drains; the next line of it is the same fault."""
        h = harness()
        now = h.clock.time()

        first = h.see(detection(line_time=now))
        second = h.see(detection(offset=200, line_time=now + 1))

        assert ("opened", "drain") == (first.decision, first.action)
        assert ("folded", first.fault_id) == (second.decision, second.fault_id)
        fault = h.only()
        assert ("firing", 2, "observed") == (fault.state, fault.count, fault.outcome)
        assert fault.slurm_reason == (
            f"sigwatch: nvidia_xid_79_fallen_off_bus: Xid 79: the GPU fell off the bus "
            f"[{fault.id}]")

    def test_user_owned_failures_never_open_a_fault(self, harness: Any) -> None:
        """Even critical: a job's own failure is the user's, not the node's."""
        h = harness(mode="act")

        decision = h.see(detection("cuda_out_of_memory", owner="user"))

        assert ("none", "none") == (decision.decision, decision.action)
        assert "user-owned" in decision.rule
        assert () == h.engine.faults()

    def test_three_xid_48_within_a_day_open_a_fault_on_the_third(self, harness: Any) -> None:
        """A count within a window, from the config; an old one slides out of the window."""
        h = harness(settings={"signatures": {"nvidia_xid_48_double_bit_ecc": {
            "action": "drain", "count": 3, "window_seconds": DAY}}})
        sig = "nvidia_xid_48_double_bit_ecc"
        t0 = h.clock.time()

        got = [h.see(detection(sig, offset=100, line_time=t0)).decision,
               h.see(detection(sig, offset=200, line_time=t0 + 3600)).decision,
               h.see(detection(sig, offset=300, line_time=t0 + DAY + 60)).decision,
               h.see(detection(sig, offset=400, line_time=t0 + DAY + 120)).decision]

        assert ["counting", "counting", "counting", "opened"] == got
        assert "2 of 3 within 24h" == h.decisions[2].detail

    def test_the_same_line_read_again_is_a_duplicate(self, harness: Any) -> None:
        """Same stream, offset and signature (a re-read after a crash): no second fault."""
        h = harness()
        d = detection(line_time=h.clock.time())
        h.see(d)
        h.clock.advance(30)

        again = h.see(detection(line_time=d.line_time))

        assert "duplicate" == again.decision
        assert 1 == h.only().count

    def test_a_line_written_before_this_boot_is_stale(self, harness: Any) -> None:
        """The line's own time is before the kernel's boot time: old news, nothing opens."""
        boot_start = 1_800_000_000.0
        h = harness(boot=FakeBoot(started=boot_start))

        decision = h.see(detection(line_time=boot_start - 3600))

        assert "stale_boot" == decision.decision
        assert () == h.engine.faults()

    def test_an_old_line_never_reopens_a_cleared_fault_but_a_new_one_opens_another(
            self, harness: Any) -> None:
        """After a clear, a line older than the clear (a rotated copy read again under a new
        name: a new event id) is stale; a line written after it opens a new fault."""
        h = harness()
        t0 = h.clock.time()
        h.see(detection(line_time=t0))
        fid = h.only().id
        h.tick(60)
        assert h.engine.clear(fid, by="alice").ok

        old = h.see(dataclasses.replace(detection(line_time=t0), stream_key="dev:ino2:rot"))
        h.clock.advance(60)
        new = h.see(detection(offset=900, line_time=h.clock.time()))

        assert "stale_cleared" == old.decision
        assert "opened" == new.decision and new.fault_id != fid

    def test_a_line_stamped_in_the_future_uses_its_read_time(self, harness: Any) -> None:
        """A syslog stamp with a wrong year guess is not believed."""
        h = harness()

        h.engine.emit(detection(line_time=h.clock.time() + 30 * DAY, read_at=h.clock.time()))

        assert h.clock.time() == h.only().first_seen


class TestLifecycle:
    def test_a_reboot_starts_the_clean_window_and_the_fault_clears_only_after_it(
            self, harness: Any) -> None:
        """firing -> recovering (new boot id) -> cleared by reboot once 600 s pass quietly."""
        h = harness()
        h.see(detection(line_time=h.clock.time()))
        h.boot.reboot()

        h.tick(1)
        state_after_boot = h.only().state
        h.tick(598)
        state_before_window = h.only().state
        h.tick(2)

        assert ("recovering", "recovering") == (state_after_boot, state_before_window)
        fault = h.only()
        assert ("cleared", "reboot") == (fault.state, fault.cleared_by)
        assert ("boot-1", "boot-2") == fault.boots

    def test_it_comes_back_after_a_reboot_and_escalates_after_two(self, harness: Any) -> None:
        """A line in the clean window is a reboot that did not help; after two, no reboot
        clears the fault any more."""
        h = harness(settings={"escalate_after_reboots": 2})
        offset = 100

        def again() -> str:
            nonlocal offset
            offset += 100
            h.clock.advance(5)
            return h.see(detection(offset=offset, line_time=h.clock.time())).decision

        again()
        h.boot.reboot()
        h.tick(1)
        first = again()
        h.boot.reboot()
        h.tick(1)
        second = again()
        h.boot.reboot()
        h.tick(10_000)

        assert ("recurred", "escalated") == (first, second)
        fault = h.only()
        assert ("escalated", 2) == (fault.state, fault.failed_reboots)
        assert ["sigwatch_fault_escalated"] == [n.signature for n in h.notices]

    def test_a_fault_back_soon_after_a_reboot_cleared_it_counts_that_reboot(
            self, harness: Any) -> None:
        """Cleared by reboot, back a day later: a new fault that knows the reboot failed."""
        h = harness()
        h.see(detection(line_time=h.clock.time()))
        h.boot.reboot()
        h.tick(1)
        h.tick(700)
        h.clock.advance(DAY)

        decision = h.see(detection(offset=500, line_time=h.clock.time()))

        assert "opened" == decision.decision
        newest = h.engine.faults()[0]
        assert 1 == newest.failed_reboots

    def test_a_recovery_line_named_by_the_signature_clears_its_fault(
            self, tmp_path: Path, write_pattern: Any) -> None:
        """``[policy] recovered_by`` in a signature file: that signature's line clears it."""
        write_pattern("site_gpu_lost", """
            id = 'site_gpu_lost'
            title = 'Site GPU Lost'
            severity = 'critical'
            owner = 'node'
            [match]
            regex = 'SITE GPU LOST'
            [policy]
            recovered_by = ['site_gpu_back']
            [[examples]]
            kind = 'match'
            text = 'SITE GPU LOST'
            """)
        root = write_pattern("site_gpu_back", """
            id = 'site_gpu_back'
            title = 'Site GPU Back'
            severity = 'info'
            owner = 'node'
            [match]
            regex = 'SITE GPU BACK'
            [[examples]]
            kind = 'match'
            text = 'SITE GPU BACK'
            """)
        patterns, errors = load_patterns([root])
        assert [] == errors
        h = Harness(tmp_path, patterns)
        t0 = h.clock.time()
        h.see(detection("site_gpu_lost", line_time=t0))

        old = h.see(detection("site_gpu_back", severity=Severity.INFO, offset=50,
                              line_time=t0 - 10))
        back = h.see(detection("site_gpu_back", severity=Severity.INFO, offset=300,
                               line_time=t0 + 10))

        assert "none" == old.decision  # a recovery line older than the fault clears nothing
        assert "recovery" == back.decision
        fault = h.only()
        assert ("cleared", "recovery:site_gpu_back") == (fault.state, fault.cleared_by)

    def test_a_restart_keeps_the_fault_open_and_the_window_running(self, harness: Any) -> None:
        """The book is on disk: a new engine (a restarted daemon) finds the recovering fault
        with its window start, and clears it at the same time as without the restart."""
        h = harness()
        h.see(detection(line_time=h.clock.time()))
        h.boot.reboot()
        h.tick(1)
        since = h.only().recovering_since

        h.restart()
        h.tick(300)
        during = h.only()
        h.restart()
        h.tick(301)

        assert ("recovering", since) == (during.state, during.recovering_since)
        assert "cleared" == h.only().state

    def test_a_lost_book_still_never_acts_on_a_line_from_before_this_boot(
            self, tmp_path: Path, harness: Any) -> None:
        """faults.json and its previous generation gone: the line's own time against the boot
        time still says the Xid is old."""
        h = harness(boot=FakeBoot(started=1_800_000_000.0))
        t0 = h.clock.time()
        h.see(detection(line_time=t0 + 10))
        h.engine.close()
        for name in ("faults.json", "faults.json.prev"):
            (tmp_path / "state" / name).unlink(missing_ok=True)
        h.boot.reboot(started=t0 + 3600)
        h.clock.advance(3600)
        h.restart()

        again = h.see(detection(line_time=t0 + 10))

        assert "stale_boot" == again.decision
        assert () == h.engine.faults()

    def test_an_explicit_clear_names_who_and_why_and_is_refused_twice(
            self, harness: Any) -> None:
        h = harness()
        h.see(detection(line_time=h.clock.time()))
        fid = h.only().id

        first = h.engine.clear(fid, by="alice", note="GPU reseated")
        second = h.engine.clear(fid, by="bob")
        unknown = h.engine.clear("f0000000", by="bob")

        assert first.ok and not second.ok and not unknown.ok
        assert "already cleared (manual:alice)" in second.message
        fault = h.only()
        assert ("manual:alice", "GPU reseated") == (fault.cleared_by, fault.note)
        assert "observed" == fault.outcome  # observe mode: would resume

    def test_clear_requests_dropped_in_the_folder_are_answered(
            self, tmp_path: Path, library: PatternSet) -> None:
        """What `sigwatch faults clear` does while the daemon runs."""
        import json

        h = Harness(tmp_path, library)
        h.engine.requests_dir = tmp_path / "requests"
        h.engine.requests_dir.mkdir()
        h.see(detection(line_time=h.clock.time()))
        fid = h.only().id
        (tmp_path / "requests" / "clear-1.json").write_text(
            json.dumps({"fault": fid, "by": "carol"}))

        h.tick(1)

        answer = json.loads((tmp_path / "requests" / "clear-1.result").read_text())
        assert answer["ok"] and fid in answer["message"]
        assert not (tmp_path / "requests" / "clear-1.json").exists()
        assert "manual:carol" == h.only().cleared_by
