"""The circuit breaker refuses the third drain when the limit is two: logged, counted, paged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.daemon import wait_for
from support.servers import Alertmanager, WebhookReceiver, alertmanager_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_breaker_refuses_the_third_drain_with_a_limit_of_two(
        tmp_path: Path, cluster: Any, sigwatch_node: Any) -> None:
    """max_share 0.5 of a four-node partition allows two nodes drained by sigwatch: n1 and n2
    drain, n3's drain is refused (the fault stays firing, the node keeps taking jobs), which is
    logged, counted and paged; once n1 is resumed, n3's retry drains it."""
    pager = WebhookReceiver()
    am = Alertmanager(tmp_path / "am", alertmanager_config(pager.url))
    try:
        am.wait_ready()
        nodes = [sigwatch_node(name, max_share=0.5, alertmanager=am.url).start()
                 for name in ("n1", "n2", "n3")]
        for n in nodes[:2]:
            n.xid79()
            wait_for(lambda n=n: cluster.node(n.node).drained, 60, f"{n.node} drained")

        third = nodes[2]
        third.xid79()
        wait_for(lambda: third.actions("drain", "refused_share") >= 1, 60, "the refusal")

        assert not cluster.node("n3").drained
        fault = third.fault()
        assert "firing" == fault["state"] and "refused_share" == fault["outcome"]
        assert "2 of 4 nodes" in fault["outcome_detail"]
        assert 1.0 == third.metric("sigwatch_drain_breaker_open")
        assert '"event": "drain_refused"' in third.stderr()
        code, line = third.health()
        assert 1 == code and "refused share" in line

        def paged() -> bool:
            return any(a["labels"].get("signature") == "sigwatch_node_drain_refused_share"
                       and a["labels"]["node"] == "n3" for a in am.alerts())
        wait_for(paged, 60, "the refusal paged")
        [alert] = [a for a in am.alerts()
                   if a["labels"]["signature"] == "sigwatch_node_drain_refused_share"]
        assert "critical" == alert["labels"]["severity"]

        cluster.admin_resume("n1")  # room again: the pending drain goes through on retry
        wait_for(lambda: cluster.node("n3").drained, 120, "n3 drained on retry")
        assert "drained" == third.fault()["outcome"]
        assert 0.0 == third.metric("sigwatch_drain_breaker_open")
    finally:
        am.stop()
        pager.stop()
