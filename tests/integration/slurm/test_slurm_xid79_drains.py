"""An Xid 79 drains the node in a real Slurm with sigwatch's reason, once, and pages it."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.daemon import wait_for
from support.servers import Alertmanager, WebhookReceiver, alertmanager_config
from support.slurm import REASON_RE

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_an_xid_79_drains_the_node_with_the_reason_within_5_s_once_and_pages(
        tmp_path: Path, cluster: Any, sigwatch_node: Any) -> None:
    """The line's own time and the controller's reason time are at most 5 s apart; a second
    Xid 79 of the same fault folds into it and does not drain again; health says so."""
    pager = WebhookReceiver()
    am = Alertmanager(tmp_path / "am", alertmanager_config(pager.url))
    try:
        am.wait_ready()
        node = sigwatch_node("n1", alertmanager=am.url).start()
        written = node.xid79()

        wait_for(lambda: cluster.node("n1").drained, 60, "n1 drained")

        view = cluster.node("n1")
        m = re.match(REASON_RE, view.reason)
        assert m is not None, view.reason
        fault = node.fault()
        assert fault["id"] == m.group(1)
        assert "drained" == fault["outcome"]
        assert "firing" == fault["state"]
        assert f"Reason={view.reason}" in cluster.show_node("n1")
        drained_at = datetime.fromisoformat(view.reason_time).timestamp()
        assert drained_at - written <= 5.0, (view.reason_time, written)
        assert 1.0 == node.actions("drain", "drained")

        wait_for(lambda: node.health()[0] != 0, 60, "health to report the fault")
        code, line = node.health()
        assert 1 == code, line
        assert fault["id"] in line and "nvidia_xid_79_fallen_off_bus" in line

        node.xid79()  # the same fault again: folded, never a second drain
        wait_for(lambda: node.decisions("folded") >= 1, 60, "the repeat folded")
        assert view.reason_time == cluster.node("n1").reason_time
        assert 1.0 == node.actions("drain", "drained")
        assert 2 == node.fault()["count"]

        def paged() -> bool:
            return any(a["labels"].get("signature") == "sigwatch_node_drain_drained"
                       for a in am.alerts())
        wait_for(paged, 60, "the drain paged through Alertmanager")
        [alert] = [a for a in am.alerts()
                   if a["labels"]["signature"] == "sigwatch_node_drain_drained"]
        assert "n1" == alert["labels"]["node"]
        assert fault["id"] in alert["annotations"]["description"]
    finally:
        am.stop()
        pager.stop()
