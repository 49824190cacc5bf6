"""Fixture: serve a ``WebApp`` on 127.0.0.1 (port 0) and stop it by the end of the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.web import NOW, Served

from sigwatch.clock import FakeClock
from sigwatch.web.app import WebApp
from sigwatch.web.server import ServerLimits, TLSConfig, WebServer
from sigwatch.web.status import Liveness, StaticStatus
from sigwatch.web.store import DetectionStore

ServeFactory = Callable[..., Served]


@pytest.fixture(name="serve")
def _serve() -> Iterator[ServeFactory]:
    """Start an app on 127.0.0.1:0; every server started is stopped at the end."""
    servers: list[WebServer] = []

    def start(*, store: DetectionStore | None = None, status: StaticStatus | None = None,
              limits: ServerLimits | None = None, tls: TLSConfig | None = None,
              auth: Any = None, listen: str = "127.0.0.1:0",
              registry: CollectorRegistry | None = None,
              on_event: Any = None, node: str = "node7") -> Served:
        clock = FakeClock(NOW)
        liveness = Liveness(clock, max_silence=30)
        registry = registry or CollectorRegistry()
        store = store if store is not None else DetectionStore(None)
        app = WebApp(registry=registry, liveness=liveness,
                     status=status if status is not None else StaticStatus(),
                     store=store, auth=auth, clock=clock, node=node)
        server = WebServer(app, listen, tls=tls, limits=limits, on_event=on_event)
        server.start()
        servers.append(server)
        return Served(server, app, store, liveness, clock, registry)

    yield start
    for s in servers:
        s.stop(timeout=5)


