"""Helpers for the HTTP tests: raw requests, a served app, detections made by the real engine."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import ssl
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from sigwatch.clock import FakeClock
from sigwatch.model import Detection, Remediation, Severity, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.scanning import scan_bytes
from sigwatch.web.app import WebApp
from sigwatch.web.server import WebServer
from sigwatch.web.status import Liveness, SourceStatus, StaticStatus, signature_infos
from sigwatch.web.store import DetectionStore, StatusPageSink

NOW = 1_700_000_000.0


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def request(url_base: str, path: str, *, method: str = "GET",
            headers: dict[str, str] | None = None, body: bytes | None = None,
            context: ssl.SSLContext | None = None, timeout: float = 10.0) -> Reply:
    """One request with http.client: any status comes back (no exception for 4xx/5xx)."""
    scheme, _, hostport = url_base.partition("://")
    host, _, port = hostport.rstrip("/").rpartition(":")
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host.strip("[]"), int(port), timeout=timeout,
                                           context=context)
    else:
        conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def make_detection(n: int = 0, **changes: Any) -> Detection:
    """A plausible detection; ``n`` varies offset and time so each is distinct."""
    base = Detection(
        signature="cuda_out_of_memory", title="CUDA Out Of Memory",
        severity=Severity.ERROR, status="stable", source="training",
        path="/var/log/training/job.log", stream_key="dev:ino:abc", line=10 + n,
        offset=1000 + 100 * n, text=f"torch.OutOfMemoryError: CUDA out of memory ({n})",
        time=NOW + n, remediation=Remediation(
            summary="Lower the batch size.", steps=("Halve the batch.", "Restart the job."),
            runbook="https://example.org/runbooks/oom", action="restart"),
        context=("step 99 loss 1.0",), rank="0", host="node7")
    return dataclasses.replace(base, **changes)


@dataclass
class Served:
    server: WebServer
    app: WebApp
    store: DetectionStore
    liveness: Liveness
    clock: FakeClock
    registry: CollectorRegistry

    @property
    def base(self) -> str:
        return self.server.url("").rstrip("/")

    def get(self, path: str, **kw: Any) -> Reply:
        return request(self.base, path, **kw)


INCIDENT_LOG = (
    b"step 4100 loss 2.3107 lr 3e-4\n"
    b"/pytorch/aten/src/ATen/native/cuda/Loss.cu:242: nll_loss_forward_reduce_cuda_kernel_2d:"
    b" block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\n"
    b"step 4101 loss 2.3099 lr 3e-4\n"
    b"RuntimeError: CUDA error: device-side assert triggered "
    b"<script>document.title='PWNED';alert(1)</script>\n"
    b"Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 \xff\xfe"
    b" has a total capacity of 79.15 GiB\n"
)
"""Incident lines: a kernel assertion, then the RuntimeError with HTML in it, then an OOM
line holding bytes that are not UTF-8."""


def engine_detections(library: PatternSet, data: bytes = INCIDENT_LOG,
                      sinks: list[Any] | None = None) -> list[Detection]:
    """Run ``data`` through the real engine (the built-in library) into ``sinks``."""
    clock = FakeClock(NOW)
    pipeline = Pipeline(Engine(library), sinks or [], clock=clock, host="node7")
    stream = StreamInfo("training", "/var/log/training/run-17/rank0.log", "dev:ino:run17")
    return scan_bytes(pipeline, stream, data)


def engine_store(library: PatternSet, store: DetectionStore) -> list[Detection]:
    """Fill ``store`` through the real sink, as the daemon will."""
    return engine_detections(library, sinks=[StatusPageSink(store)])


def status_for(library: PatternSet, open_incidents: list[Detection] | None = None,
               ) -> StaticStatus:
    """Two sources (a file source and the kernel log) and the library's signatures."""
    return StaticStatus(
        open_incidents=open_incidents or [],
        sources=[SourceStatus("training", "file", 3, 120_345, 9_876_543, 0, "bytes",
                              NOW - 2, 0),
                 SourceStatus("kernel", "kmsg", 1, 4_210, 401_000, None, "none", None, 2)],
        signatures=signature_infos(library.signatures))
