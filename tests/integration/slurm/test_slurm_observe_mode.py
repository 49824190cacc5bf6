"""Observe mode drains nothing and says what it would have done."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_observe_mode_drains_nothing_and_says_what_it_would_have_done(
        cluster: Any, sigwatch_node: Any) -> None:
    """The fault opens and is listed with outcome observed and the exact reason it would set;
    the log says would_drain with the scontrol command; the node stays idle; health is 0 and
    names the fault; a manual clear says it would resume."""
    node = sigwatch_node("n4", mode="observe").start()
    node.xid79()
    wait_for(lambda: node.actions("drain", "observed") >= 1, 60, "the observed drain")

    fault = node.fault()
    assert "firing" == fault["state"] and "observed" == fault["outcome"]
    assert f'Reason="{fault["slurm_reason"]}"' in fault["outcome_detail"]
    assert fault["slurm_reason"].startswith("sigwatch: nvidia_xid_79_fallen_off_bus: ")
    log = node.stderr()
    assert '"event": "would_drain"' in log
    assert "scontrol update NodeName=n4 State=DRAIN" in log
    assert not cluster.node("n4").drained
    assert "" == cluster.node("n4").reason
    assert 0.0 == node.actions("drain", "drained")
    assert 1.0 == node.metric('sigwatch_policy_mode{mode="observe"}')
    wait_for(lambda: fault["id"] in node.health()[1], 60, "health to name the fault")
    code, line = node.health()
    assert 0 == code and line.startswith("ok (observe mode")

    done = node.cli("faults", "clear", fault["id"])
    assert 0 == done.returncode, done.stderr
    assert 1.0 == node.actions("resume", "observed")
    assert not cluster.node("n4").drained
