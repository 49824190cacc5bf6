"""Node faults over HTTP: the list, the explicit clear (JSON only, authenticated when auth is
on) and the section of the status page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.web import NOW, basic, request

from sigwatch.clock import FakeClock
from sigwatch.faults.engine import FaultEngine
from sigwatch.faults.policy import Policy
from sigwatch.faults.settings import PolicySettings
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.web.app import WebApp
from sigwatch.web.auth import BasicAuth, hash_password
from sigwatch.web.server import WebServer
from sigwatch.web.status import Liveness, StaticStatus
from sigwatch.web.store import DetectionStore

XID = Detection(
    signature="nvidia_xid_79_fallen_off_bus", title="NVIDIA Xid 79 <GPU> Has Fallen Off",
    severity=Severity.CRITICAL, status="stable", source="kernel", path="/var/log/kern.log",
    stream_key="k", line=3, offset=300, text="NVRM: Xid (PCI:0000:2b:00): 79, ...", time=NOW,
    remediation=Remediation(summary="Reboot the node."), owner="node", line_time=NOW)


class Served:
    def __init__(self, engine: FaultEngine, server: WebServer) -> None:
        self.engine = engine
        self.server = server

    @property
    def base(self) -> str:
        return self.server.url("").rstrip("/")

    def fault_id(self) -> str:
        return self.engine.faults()[0].id

    def clear(self, fault_id: str, body: bytes = b"{}", **headers: str) -> Any:
        return request(self.base, f"/api/v1/faults/{fault_id}/clear", method="POST",
                       body=body, headers={"Content-Type": "application/json", **headers})


@pytest.fixture(name="served")
def _served(tmp_path: Path) -> Iterator[Any]:
    servers: list[WebServer] = []

    def start(*, auth: BasicAuth | None = None) -> Served:
        clock = FakeClock(NOW)
        engine = FaultEngine(Policy(PolicySettings(mode="observe")), clock=clock)
        engine.emit(XID)
        app = WebApp(registry=CollectorRegistry(), liveness=Liveness(clock),
                     status=StaticStatus(), store=DetectionStore(None), auth=auth, clock=clock,
                     node="node7", faults=engine)
        server = WebServer(app, "127.0.0.1:0")
        server.start()
        servers.append(server)
        return Served(engine, server)

    yield start
    for s in servers:
        s.stop(timeout=5)


class TestFaultsApi:
    def test_the_list_carries_every_fault_and_the_mode(self, served: Any) -> None:
        s = served()

        reply = request(s.base, "/api/v1/faults")

        assert 200 == reply.status
        doc = json.loads(reply.body)
        assert "observe" == doc["mode"]
        assert [s.fault_id()] == [f["id"] for f in doc["faults"]]
        assert "firing" == doc["faults"][0]["state"]
        one = json.loads(request(s.base, f"/api/v1/faults/{s.fault_id()}").body)
        assert s.fault_id() == one["fault"]["id"]

    def test_a_clear_needs_json_and_is_answered_once(self, served: Any) -> None:
        s = served()
        fid = s.fault_id()

        form = request(s.base, f"/api/v1/faults/{fid}/clear", method="POST", body=b"by=x",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})
        get = request(s.base, f"/api/v1/faults/{fid}/clear")
        first = s.clear(fid, json.dumps({"by": "alice", "note": "reseated"}).encode())
        second = s.clear(fid)
        missing = s.clear("f0000000")

        assert (400, "Content-Type") == (form.status, json.loads(form.body)["error"]["parameter"])
        assert 405 == get.status
        assert 200 == first.status
        doc = json.loads(first.body)
        assert doc["cleared"] and "manual:alice" == doc["fault"]["cleared_by"]
        assert "reseated" == doc["fault"]["note"]
        assert 409 == second.status
        assert 404 == missing.status

    def test_with_auth_on_a_clear_needs_credentials_and_names_the_user(self,
                                                                       served: Any) -> None:
        s = served(auth=BasicAuth({"oncall": hash_password("pw", rounds=1000)}))
        fid = s.fault_id()

        anonymous = s.clear(fid)
        wrong = s.clear(fid, **basic("oncall", "nope"))
        right = s.clear(fid, json.dumps({"by": "bob"}).encode(), **basic("oncall", "pw"))

        assert (401, 401, 200) == (anonymous.status, wrong.status, right.status)
        assert "manual:bob (as oncall)" == json.loads(right.body)["fault"]["cleared_by"]
        assert "firing" != s.engine.faults()[0].state


class TestFaultsOnTheStatusPage:
    def test_the_index_shows_the_open_fault_escaped(self, served: Any) -> None:
        s = served()

        page = request(s.base, "/").text

        assert '<h2 id="faults">Node faults</h2>' in page
        assert s.fault_id() in page
        assert "NVIDIA Xid 79 &lt;GPU&gt; Has Fallen Off" in page
        assert "<GPU>" not in page
        assert "Policy mode: <b>observe</b>" in page
