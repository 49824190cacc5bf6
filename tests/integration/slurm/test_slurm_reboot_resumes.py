"""A new boot and a clean window resume the node, and not before; an old Xid read again after
a lost checkpoint never opens a fault again."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW = 15.0


def test_a_reboot_and_a_clean_window_resume_the_node_and_not_before(
        cluster: Any, sigwatch_node: Any) -> None:
    """Drained by an Xid 79; the daemon restarts on a new boot id: the fault is recovering and
    the node stays drained; after the clean window the fault clears (by reboot) and the node is
    resumed. Then the checkpoint is lost and the old line read again: nothing happens."""
    node = sigwatch_node("n1", clean_window=WINDOW).start()
    node.xid79()
    wait_for(lambda: cluster.node("n1").drained, 60, "n1 drained")
    reason = cluster.node("n1").reason

    node.stop()
    node.reboot()
    node.start()

    wait_for(lambda: node.fault()["state"] != "firing", 60, "the fault to see the reboot")
    seen_drained = cluster.node("n1")
    fault = node.fault()
    # Read after the node: the node was drained while the fault was recovering.
    assert "recovering" == fault["state"], fault
    assert seen_drained.drained and reason == seen_drained.reason
    assert 2 == len(fault["boots"])

    wait_for(lambda: not cluster.node("n1").drained, WINDOW + 120, "n1 resumed")
    cleared = node.fault()
    assert "cleared" == cleared["state"]
    assert "reboot" == cleared["cleared_by"]
    assert "resumed" == cleared["outcome"]
    assert cleared["cleared_at"] - fault["recovering_since"] >= WINDOW
    assert 1.0 == node.actions("resume", "resumed")
    assert "" == cluster.node("n1").reason

    # The old Xid line read again (lost checkpoint, the file is read from its start).
    node.stop()
    node.lose_checkpoint()
    node.start()
    wait_for(lambda: node.detections("nvidia_xid_79_fallen_off_bus") >= 1, 60,
             "the old line read again")
    wait_for(lambda: node.decisions("duplicate") + node.decisions("stale_boot")
             + node.decisions("stale_cleared") >= 1, 60, "the old line decided")
    assert 0.0 == node.decisions("opened")
    assert [cleared["id"]] == [f["id"] for f in node.faults()]
    assert "cleared" == node.fault()["state"]
    assert not cluster.node("n1").drained
    assert 0.0 == node.actions("drain", "drained")
