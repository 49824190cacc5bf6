"""Real Prometheus and Alertmanager servers on 127.0.0.1, and a webhook receiver as the pager.

Every server is a child process started on free loopback ports (clustering included) and
stopped by its PID; the Debian packages are installed when missing (``support.debian``).
Intervals are short (1 s scrapes and evaluations, 1 s group_wait) so the tests stay fast.
Waits are on conditions with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from support.daemon import free_gossip_port, free_port, wait_for
from support.debian import require

__all__ = [
    "Alertmanager",
    "AlertmanagerCluster",
    "Prometheus",
    "ServerProcess",
    "WebhookReceiver",
    "alertmanager_config",
    "get_json",
    "post_json",
]


def get_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only
        return json.loads(r.read())


def post_json(url: str, body: object, timeout: float = 3.0) -> int:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310
            return r.status == 200
    except OSError:
        return False


# -- the pager ----------------------------------------------------------------------------------


class WebhookReceiver:
    """Alertmanager's webhook receiver on 127.0.0.1: keeps every notification it is sent."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._received: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._cond:
                    receiver._received.append(json.loads(body))
                    receiver._cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def notifications(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._received)

    def alerts(self, status: str | None = None, **labels: str) -> list[dict[str, Any]]:
        """Every alert of every notification so far (in order), filtered by status and labels."""
        out = []
        for n in self.notifications():
            for a in n["alerts"]:
                if status is not None and a["status"] != status:
                    continue
                if all(a["labels"].get(k) == v for k, v in labels.items()):
                    out.append(a)
        return out

    def wait(self, condition: Callable[[WebhookReceiver], object], timeout: float,
             what: str) -> Any:
        """Wait until ``condition(self)`` is truthy (woken by each notification)."""
        with self._cond:
            if not self._cond.wait_for(lambda: condition(self), timeout):
                got = json.dumps(self._received, indent=1)[-3000:]
                pytest.fail(f"timed out after {timeout}s waiting for {what}; received: {got}")
        return condition(self)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- child processes ------------------------------------------------------------------------------


class ServerProcess:
    """A server child process with its output in a log file, stopped by PID."""

    def __init__(self, args: Sequence[str], log_path: Path) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Alertmanager(ServerProcess):
    """``prometheus-alertmanager`` on 127.0.0.1, optionally a member of a loopback cluster."""

    def __init__(self, workdir: Path, config: str, *, cluster_port: int | None = None,
                 peers: Sequence[int] = ()) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "alertmanager.yml").write_text(config)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cluster = [f"--cluster.listen-address=127.0.0.1:{cluster_port}",
                   f"--cluster.advertise-address=127.0.0.1:{cluster_port}",
                   "--cluster.gossip-interval=50ms", "--cluster.pushpull-interval=1s",
                   "--cluster.peer-timeout=2s", "--cluster.settle-timeout=5s",
                   "--cluster.probe-interval=200ms", "--cluster.reconnect-interval=1s",
                   *(f"--cluster.peer=127.0.0.1:{p}" for p in peers)] \
            if cluster_port else ["--cluster.listen-address="]
        args = [require("prometheus-alertmanager"),
                f"--config.file={workdir / 'alertmanager.yml'}",
                f"--storage.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.external-url=http://127.0.0.1:{self.port}",
                *cluster]
        super().__init__(args, workdir / "alertmanager.log")

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if not self.running():
                pytest.fail(f"alertmanager exited: {self.log()}")
            return _ready(self.url + "/-/ready")
        wait_for(ready, timeout, "alertmanager ready")

    def restart(self) -> None:
        self.stop()
        self.start()
        self.wait_ready()

    def alerts(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = get_json(self.url + "/api/v2/alerts")
        return result

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = get_json(self.url + "/api/v2/status")
        return result


class AlertmanagerCluster:
    """``n`` Alertmanager replicas gossiping on loopback, like a production HA pair."""

    def __init__(self, workdir: Path, config: str, n: int = 2) -> None:
        ports = [free_gossip_port() for _ in range(n)]
        self.replicas = [
            Alertmanager(workdir / f"am{i}", config, cluster_port=ports[i],
                         peers=[p for j, p in enumerate(ports) if j != i])
            for i in range(n)]

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until every replica reports the cluster ready with all peers. The bound is
        generous: on a loaded 2-core machine a replica's first join can fail and is retried
        on the reconnect interval. A timeout names what each replica last reported."""
        for r in self.replicas:
            r.wait_ready(timeout)
        last: list[str] = []

        def clustered() -> bool:
            last.clear()
            settled = True
            for r in self.replicas:
                cluster = r.status()["cluster"]
                last.append(f"{r.url}: {cluster['status']}, {len(cluster['peers'])} peers")
                if cluster["status"] != "ready" or len(cluster["peers"]) != len(self.replicas):
                    settled = False
            return settled
        try:
            wait_for(clustered, timeout, "the alertmanager cluster to settle")
        except BaseException:
            for r in self.replicas:
                print(f"--- {r.url} log tail ---\n{r.log()[-3000:]}")
            print("last status: " + "; ".join(last))
            raise

    def stop(self) -> None:
        for r in self.replicas:
            r.stop()


def alertmanager_config(webhook_url: str, *, group_by: Sequence[str] = ("alertname", "signature"),
                        group_wait: str = "1s", group_interval: str = "2s",
                        extra: str = "") -> str:
    """A minimal config for tests: everything to the webhook, resolutions too."""
    return (
        "route:\n"
        "  receiver: pager\n"
        f"  group_by: {json.dumps(list(group_by))}\n"
        f"  group_wait: {group_wait}\n"
        f"  group_interval: {group_interval}\n"
        "  repeat_interval: 1h\n"
        "receivers:\n"
        "  - name: pager\n"
        "    webhook_configs:\n"
        f"      - url: {json.dumps(webhook_url)}\n"
        "        send_resolved: true\n"
        f"{extra}")


class Prometheus(ServerProcess):
    """``prometheus`` on 127.0.0.1 with a given config (1 s scrapes and evaluations)."""

    def __init__(self, workdir: Path, config: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "prometheus.yml").write_text(config)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [require("prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.external-url=http://127.0.0.1:{self.port}",
                "--rules.alert.resend-delay=1s", "--rules.alert.for-grace-period=1s"]
        super().__init__(args, workdir / "prometheus.log")

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if not self.running():
                pytest.fail(f"prometheus exited: {self.log()}")
            return _ready(self.url + "/-/ready")
        wait_for(ready, timeout, "prometheus ready")

    def query(self, expr: str) -> dict[str, Any]:
        """The raw API answer for an instant query (status error for invalid PromQL)."""
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310
                result: dict[str, Any] = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            result = json.loads(exc.read())
        return result

    def firing(self, alertname: str) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = get_json(self.url + "/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts
                if a["labels"]["alertname"] == alertname and a["state"] == "firing"]

    def targets_up(self) -> dict[str, float]:
        data = self.query("up")["data"]["result"]
        return {r["metric"]["instance"]: float(r["value"][1]) for r in data}


def stop_all(servers: Iterator[ServerProcess | AlertmanagerCluster | WebhookReceiver]) -> None:
    for s in servers:
        s.stop()
