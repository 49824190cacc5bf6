"""A node an admin drained keeps the admin's reason: sigwatch neither drains nor resumes it."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN = "maintenance: PSU swap (ticket 4711)"


def test_an_admin_drain_is_kept_through_the_fault_and_its_clear(
        cluster: Any, sigwatch_node: Any) -> None:
    """The fault opens and is counted as kept_other_drain; clearing it by hand leaves the node
    drained with the admin's reason (not sigwatch's to resume)."""
    cluster.admin_drain("n3", ADMIN)
    before = cluster.node("n3")
    assert before.drained and ADMIN == before.reason
    node = sigwatch_node("n3").start()

    node.xid79()
    wait_for(lambda: node.actions("drain", "kept_other_drain") >= 1, 60,
             "the drain decision on an admin-drained node")

    fault = node.fault()
    assert "firing" == fault["state"]
    assert "kept_other_drain" == fault["outcome"]
    assert ADMIN in fault["outcome_detail"]
    after = cluster.node("n3")
    assert after.drained and ADMIN == after.reason
    assert before.reason_time == after.reason_time  # not even rewritten
    assert 0.0 == node.actions("drain", "drained")

    done = node.cli("faults", "clear", fault["id"], "--note", "PSU swapped")
    assert 0 == done.returncode, done.stderr
    assert f"fault {fault['id']} cleared" in done.stdout

    cleared = node.fault()
    assert "cleared" == cleared["state"]
    assert cleared["cleared_by"].startswith("manual:")
    still = cluster.node("n3")
    assert still.drained and ADMIN == still.reason
    assert 0.0 == node.actions("resume", "resumed")


def test_a_drain_an_admin_took_over_is_not_resumed_when_the_fault_clears(
        cluster: Any, sigwatch_node: Any) -> None:
    """sigwatch drained the node; an admin then set a reason of their own: the clear leaves
    the node drained (outcome not_ours)."""
    node = sigwatch_node("n4").start()
    node.xid79()
    wait_for(lambda: cluster.node("n4").drained, 60, "n4 drained by sigwatch")
    cluster.admin_drain("n4", ADMIN)

    fault = node.fault()
    done = node.cli("faults", "clear", fault["id"])
    assert 0 == done.returncode, done.stderr

    assert "not_ours" == node.fault()["outcome"]
    after = cluster.node("n4")
    assert after.drained and ADMIN == after.reason
    assert 1.0 == node.actions("resume", "not_ours")
    assert 0.0 == node.actions("resume", "resumed")
