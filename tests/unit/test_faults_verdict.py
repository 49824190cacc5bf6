"""`sigwatch health`'s side of the verdict: who holds the lock, how old the verdict is, and the
exit status and line for each case."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sigwatch.faults.verdict import (
    EXIT_BLIND,
    EXIT_FAULT,
    EXIT_HEALTHY,
    EXIT_NO_DAEMON,
    OpenFault,
    VerdictWriter,
    daemon_pid,
    evaluate,
    state_dir_of,
)
from sigwatch.process import InstanceLock

NOW = time.time()
FAULT = OpenFault("f1234abc", "nvidia_xid_79_fallen_off_bus", "firing", "drained", NOW - 60)


@pytest.fixture(name="state")
def _state(tmp_path: Path) -> object:
    """A state folder whose instance lock this test process holds, as a daemon would."""
    lock = InstanceLock(tmp_path)
    lock.acquire()
    yield tmp_path
    lock.release()


def _write(state: Path, *, mode: str = "act", faults: tuple[OpenFault, ...] = (),
           blind: dict[str, str] | None = None, at: float = NOW) -> None:
    writer = VerdictWriter(state / "health.json", node="n1", mode=mode)
    assert writer.update(at, 0.0, faults, blind or {}, ["kernel", "training"])


class TestEvaluate:
    def test_no_daemon_holds_the_lock(self, tmp_path: Path) -> None:
        (tmp_path / "lock").write_text(f"{os.getpid()}\n")  # a PID, but no lock held

        code, line = evaluate(tmp_path, NOW)

        assert EXIT_NO_DAEMON == code
        assert f"sigwatch is not running (no daemon holds {tmp_path}/lock)" == line

    def test_the_holder_is_found_in_proc_locks(self, state: Path) -> None:
        assert os.getpid() == daemon_pid(state)

    def test_a_daemon_that_has_not_written_its_verdict(self, state: Path) -> None:
        code, line = evaluate(state, NOW)

        assert (EXIT_NO_DAEMON, f"sigwatch (pid {os.getpid()}) has not reported a verdict yet"
                ) == (code, line)

    def test_a_verdict_older_than_30_s_says_the_daemon_is_hung(self, state: Path) -> None:
        _write(state, at=NOW - 45)

        code, line = evaluate(state, NOW)

        assert EXIT_NO_DAEMON == code
        assert "has not reported for 45 s: hung or overloaded" in line

    def test_healthy(self, state: Path) -> None:
        _write(state)

        assert (EXIT_HEALTHY, f"ok: no open fault, 2 source(s) reading (sigwatch pid "
                f"{os.getpid()}, act mode)") == evaluate(state, NOW)

    def test_an_open_fault_in_act_mode(self, state: Path) -> None:
        _write(state, faults=(FAULT, FAULT))

        code, line = evaluate(state, NOW)

        assert EXIT_FAULT == code
        assert line.startswith("fault f1234abc firing since ")
        assert line.endswith(": nvidia_xid_79_fallen_off_bus (drained), and 1 more")

    def test_an_open_fault_in_observe_mode_is_said_but_healthy(self, state: Path) -> None:
        _write(state, mode="observe", faults=(FAULT,))

        code, line = evaluate(state, NOW)

        assert EXIT_HEALTHY == code
        assert line.startswith("ok (observe mode, nothing is done): fault f1234abc")

    def test_a_blind_source(self, state: Path) -> None:
        _write(state, blind={"kernel": "/dev/kmsg is not open"})

        assert (EXIT_BLIND, "blind: source 'kernel' cannot read: /dev/kmsg is not open"
                ) == evaluate(state, NOW)

    def test_a_fault_and_a_blind_source_say_both(self, state: Path) -> None:
        _write(state, faults=(FAULT,), blind={"kernel": "gone"})

        code, line = evaluate(state, NOW)

        assert EXIT_FAULT == code and line.endswith("; blind: source 'kernel' cannot read: gone")


class TestWriter:
    def test_it_writes_on_change_and_otherwise_every_interval(self, tmp_path: Path) -> None:
        writer = VerdictWriter(tmp_path / "health.json", node="n1", mode="act", every=2.0)

        wrote = [writer.update(NOW, 0.0, (), {}, ["k"]),
                 writer.update(NOW, 1.0, (), {}, ["k"]),
                 writer.update(NOW, 1.5, (FAULT,), {}, ["k"]),
                 writer.update(NOW, 3.6, (FAULT,), {}, ["k"])]

        assert [True, False, True, True] == wrote
        doc = json.loads((tmp_path / "health.json").read_text())
        assert ("n1", "act", ["f1234abc"]) == (doc["node"], doc["mode"],
                                              [f["id"] for f in doc["faults"]])


class TestStateDir:
    def test_from_the_config_or_the_default(self, tmp_path: Path) -> None:
        config = tmp_path / "c.toml"
        config.write_text(f'state_dir = "{tmp_path}/s"\n[policy]\nmode = "act"\n')

        assert tmp_path / "s" == state_dir_of(config)
        config.write_text('listen = "127.0.0.1:9750"\n')
        assert state_dir_of(None) == state_dir_of(config)

    def test_a_bad_file_names_itself(self, tmp_path: Path) -> None:
        config = tmp_path / "c.toml"
        config.write_text("state_dir = 3\n")

        with pytest.raises(ValueError, match=r"c\.toml: state_dir: must be a path"):
            state_dir_of(config)
