"""SIGKILL and restart of the daemon neither resume the node nor drain it again."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_sigkill_and_restart_neither_resume_nor_re_drain(
        cluster: Any, sigwatch_node: Any) -> None:
    """Drained by an Xid 79, the daemon is killed with SIGKILL, its checkpoint lost (the line is
    read again), and restarted on the same boot: the fault is still firing, the node still
    drained with the same reason set at the same time, and the new process drained and resumed
    nothing. Done twice: SIGKILL alone, then SIGKILL with the checkpoint lost."""
    node = sigwatch_node("n2").start()
    node.xid79()
    wait_for(lambda: cluster.node("n2").drained, 60, "n2 drained")
    wait_for(lambda: node.fault()["outcome"] == "drained", 60, "the drain recorded")
    before = cluster.node("n2")
    [suffix] = [line for line in cluster.show_node("n2").splitlines() if "Reason=" in line]
    fault_id = node.fault()["id"]

    for lose_checkpoint in (False, True):
        node.kill()
        if lose_checkpoint:
            node.lose_checkpoint()
        node.start()
        if lose_checkpoint:
            wait_for(lambda: node.decisions("duplicate") >= 1, 60, "the old line read again")
        else:
            wait_for(lambda: node.health()[0] == 1, 60, "the restarted daemon's verdict")

        after = cluster.node("n2")
        assert after.drained
        assert before.reason == after.reason
        assert before.reason_time == after.reason_time
        assert [suffix] == [line for line in cluster.show_node("n2").splitlines()
                            if "Reason=" in line]
        fault = node.fault()
        assert fault_id == fault["id"] and "firing" == fault["state"]
        assert 0.0 == node.actions("drain", "drained")
        assert 0.0 == node.actions("drain", "already_drained")
        assert 0.0 == node.actions("resume", "resumed")
        assert 0.0 == node.decisions("opened")
        code, line = node.health()
        assert 1 == code and fault_id in line
