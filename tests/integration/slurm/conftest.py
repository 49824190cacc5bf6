"""One real Slurm on loopback for these tests, and a real `sigwatch run` per node.

The cluster (private munged, slurmctld, four `slurmd -N NAME`) is started once for the
session and stopped by PID at the end; before each test every node is resumed, so a test
starts from four idle nodes with no reason. Each `SigwatchNode` is a daemon of its own (its
state folder, kernel log, boot-id file, listen port and config) acting on one NodeName.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.daemon import DaemonProcess, free_port, sample, scrape, wait_for
from support.slurm import XID79, SlurmCluster

NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture(name="cluster_session", scope="session")
def _cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    root = tmp_path_factory.mktemp("slurm")
    cluster = SlurmCluster(root, NODES)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture(name="cluster")
def _cluster(cluster_session: SlurmCluster) -> SlurmCluster:
    """The session's cluster with every node resumed (no drain, no reason)."""
    c = cluster_session
    for name, view in c.nodes_view().items():
        if view.drained:
            c.admin_resume(name)
    wait_for(lambda: not any(v.drained or v.reason for v in c.nodes_view().values()), 60,
             "every node resumed")
    return c


class SigwatchNode:
    """A `sigwatch run` for one Slurm node, with its own kernel log and boot id."""

    def __init__(self, root: Path, cluster: SlurmCluster, node: str, *, mode: str = "act",
                 clean_window: float = 600.0, max_share: float = 0.5, max_per_hour: int = 100,
                 extra: str = "", alertmanager: str = "", top: str = "") -> None:
        self.cluster = cluster
        self.node = node
        self.dir = root / node
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kern = self.dir / "kern.log"
        self.kern.touch()
        self.train = self.dir / "train.log"
        self.train.touch()
        self.boot_file = self.dir / "boot_id"
        self.boot_file.write_text(str(uuid.uuid4()) + "\n")
        self.state = self.dir / "state"
        self.port = free_port()
        self.config = self.dir / "sigwatch.toml"
        paging = (f'[alerting]\nalertmanagers = ["{alertmanager}"]\nresend_interval = 1\n'
                  if alertmanager else "")
        self.config.write_text(textwrap.dedent(f"""\
            listen = "127.0.0.1:{self.port}"
            state_dir = "{self.state}"
            console = false
            checkpoint_interval = 0.2
            node = "{node}"
            {top}

            [[sources]]
            name = "kernel"
            paths = ["{self.kern}"]
            content = "kernel"
            start_at = "beginning"

            [[sources]]
            name = "training"
            paths = ["{self.train}"]
            start_at = "beginning"

            [policy]
            mode = "{mode}"
            clean_window_seconds = {clean_window}
            boot_id_path = "{self.boot_file}"

            [slurm]
            node = "{node}"
            scontrol = "{cluster.tools['scontrol']}"
            sinfo = "{cluster.tools['sinfo']}"
            conf = "{cluster.conf}"
            max_share = {max_share}
            max_per_hour = {max_per_hour}
            retry_seconds = 2
            """) + paging + extra)
        self.proc: DaemonProcess | None = None
        self.runs = 0

    # -- the daemon ----------------------------------------------------------------------

    def start(self) -> SigwatchNode:
        self.runs += 1
        proc = self.proc = DaemonProcess(["--config", str(self.config)],
                                         self.dir / f"daemon{self.runs}.stderr")

        def started() -> bool:
            if proc.proc.poll() is not None:
                pytest.fail(f"sigwatch for {self.node} exited: {proc.stderr()[-3000:]}")
            value = sample(scrape(self.port), "sigwatch_checkpoint_writes_total")
            return value is not None and value >= 1

        wait_for(started, 180, f"sigwatch for {self.node} to start")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def kill(self) -> None:
        """SIGKILL: no final checkpoint, no goodbye."""
        assert self.proc is not None
        self.proc.signal(signal.SIGKILL)
        self.proc.proc.wait(timeout=30)
        self.proc._log.close()
        self.proc = None

    def stderr(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("*.stderr")))

    def reboot(self) -> None:
        """A new boot id, as after a reboot."""
        self.boot_file.write_text(str(uuid.uuid4()) + "\n")

    def lose_checkpoint(self) -> None:
        for name in ("checkpoint.json", "checkpoint.json.prev", "checkpoint.json.tmp"):
            (self.state / name).unlink(missing_ok=True)

    # -- lines -----------------------------------------------------------------------------

    def xid79(self) -> float:
        """Append an Xid 79 line stamped now (whole second, as syslog does); its time."""
        now = time.time()
        stamp = time.strftime("%b %e %H:%M:%S", time.localtime(now))
        with self.kern.open("a") as fh:
            fh.write(XID79.format(stamp=stamp, node=self.node) + "\n")
        return float(int(now))

    def train_line(self, text: str) -> None:
        with self.train.open("a") as fh:
            fh.write(text + "\n")

    # -- what it says ------------------------------------------------------------------------

    def metric(self, series: str) -> float:
        """The value of ``name{label="value",...}`` (labels in any order), -1 when absent."""
        name, _, rest = series.partition("{")
        want = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        for family in text_string_to_metric_families(scrape(self.port)):
            for s in family.samples:
                if s.name == name and s.labels == want:
                    return float(s.value)
        return -1.0

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sigwatch", *args, "--config",
                               str(self.config)], capture_output=True, text=True, timeout=120,
                              check=False)

    def faults(self) -> list[dict[str, Any]]:
        done = self.cli("faults", "list", "--all", "--format", "json")
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout)["faults"])

    def fault(self) -> dict[str, Any]:
        [only] = self.faults()
        return only

    def health(self) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-m", "sigwatch", "health", "--config",
                               str(self.config)], capture_output=True, text=True, timeout=60,
                              check=False)
        return done.returncode, done.stdout.strip()

    def actions(self, action: str, outcome: str) -> float:
        return self.metric(
            f'sigwatch_node_actions_total{{action="{action}",outcome="{outcome}"}}')

    def decisions(self, decision: str) -> float:
        return self.metric(f'sigwatch_policy_decisions_total{{decision="{decision}"}}')

    def detections(self, signature: str, source: str = "kernel",
                   severity: str = "critical") -> float:
        return self.metric(f'sigwatch_detections_total{{signature="{signature}",'
                           f'severity="{severity}",source="{source}"}}')


@pytest.fixture(name="sigwatch_node")
def _sigwatch_node(tmp_path: Path, cluster: SlurmCluster,
                   ) -> Iterator[Callable[..., SigwatchNode]]:
    made: list[SigwatchNode] = []

    def make(node: str, **kw: Any) -> SigwatchNode:
        n = SigwatchNode(tmp_path, cluster, node, **kw)
        made.append(n)
        return n

    yield make
    for n in made:
        n.stop()
