"""A real Slurm on loopback for tests: a private munged, one slurmctld, one slurmd per node.

Debian's ``slurm-wlm`` (``slurmctld``, ``slurmd``, ``scontrol``, ``sinfo``) and ``munge`` are
installed when missing (root on Debian; otherwise the test is skipped with the reason). Every
daemon runs in the foreground from a folder under the test's ``tmp_path``, on free loopback
ports, and is stopped by its PID: nothing is shared with a Slurm the machine may run, and
nothing is left behind. Facts behind the choices (the team's research note on Slurm on loopback)
(several ``slurmd -N NAME`` on one host work in 22.05; a node shows ``idle*`` for a while after
a resume, so tests look at the DRAIN flag, not at ``idle``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.daemon import free_port

__all__ = ["REASON_RE", "XID79", "NodeView", "SlurmCluster", "require_slurm"]

XID79 = ("{stamp} {node} kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=4242, name=python3, "
         "GPU has fallen off the bus.")
REASON_RE = r"^sigwatch: nvidia_xid_79_fallen_off_bus: .+ \[(f[0-9a-f]{7})\]$"

_PACKAGES = ("slurm-wlm", "munge")
_TOOLS = ("slurmctld", "slurmd", "scontrol", "sinfo", "munged", "mungekey")
_lock = threading.Lock()
_install_failure: list[str] = []


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (p for d in ("/usr/sbin", "/sbin") if os.access(p := f"{d}/{tool}", os.X_OK)), None)


def require_slurm() -> dict[str, str]:
    """Paths of the Slurm and munge programs, installing the Debian packages when missing."""
    with _lock:
        found = {t: _which(t) for t in _TOOLS}
        if all(found.values()):
            return {t: p for t, p in found.items() if p}
        if _install_failure:
            pytest.skip(_install_failure[0])
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            _install_failure.append("slurm-wlm and munge are not installed and this is not root "
                                    "on Debian (apt-get install slurm-wlm munge)")
            pytest.skip(_install_failure[0])
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        base = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]
        steps = [[*base, "install", "-y", "-qq", "--no-install-recommends", *_PACKAGES]]
        done = subprocess.run(steps[0], capture_output=True, text=True, env=env, check=False,
                              timeout=1200)
        if done.returncode != 0:  # the package lists may be missing or stale
            subprocess.run([*base, "update", "-qq"], capture_output=True, env=env,
                           check=False, timeout=1200)
            done = subprocess.run(steps[0], capture_output=True, text=True, env=env,
                                  check=False, timeout=1200)
        found = {t: _which(t) for t in _TOOLS}
        if done.returncode != 0 or not all(found.values()):
            _install_failure.append(
                f"apt-get install {' '.join(_PACKAGES)} failed: {done.stderr.strip()[-300:]}")
            pytest.skip(_install_failure[0])
        return {t: p for t, p in found.items() if p}


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as ``sinfo`` shows it."""

    name: str
    state: str  # sinfo %T, e.g. "idle", "drained", "draining", "idle*"
    reason: str  # sinfo %E, without the "[user@time]" suffix scontrol adds
    reason_time: str  # sinfo %H

    @property
    def drained(self) -> bool:
        return self.state.rstrip("*~#!%$@^-").startswith(("drain", "drng"))


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


class SlurmCluster:
    """munged + slurmctld + one slurmd per node name, all under ``root``, all on 127.0.0.1."""

    def __init__(self, root: Path, nodes: list[str], *, partition: str = "gpu") -> None:
        self.tools = require_slurm()
        self.root = root
        self.nodes = list(nodes)
        self.partition = partition
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = root / "log"
        for sub in ("log", "run", "state", "spool", "munge"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        for node in nodes:
            (root / "spool" / node).mkdir(parents=True, exist_ok=True)
        # munged refuses a socket folder that others cannot traverse.
        os.chmod(root, 0o755)
        os.chmod(root / "munge", 0o755)
        self.munge_socket = root / "munge" / "munge.socket"
        self.ctld_port = free_port()
        self.node_ports = {node: free_port() for node in nodes}
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- configuration ---------------------------------------------------------------------

    def _write_conf(self) -> None:
        r = self.root
        lines = [
            "ClusterName=sigwatchtest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={next(iter(self.node_ports.values()))}",
            "AuthType=auth/munge",
            "CryptoType=crypto/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.logs / 'slurmctld.log'}",
            f"SlurmdLogFile={self.logs}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "ReturnToService=2",
            "MailProg=/bin/true",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=300",
        ]
        for node, port in self.node_ports.items():
            lines.append(f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 "
                         f"Port={port} CPUs=1 RealMemory=100 State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={','.join(self.nodes)} "
                     "Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    # -- start and stop --------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"{name}.out", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                start_new_session=True)
        out.close()
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 120.0) -> SlurmCluster:
        t = self.tools
        key = self.root / "munge" / "munge.key"
        subprocess.run([t["mungekey"], "-c", "-f", "-k", str(key)], check=True,
                       capture_output=True)
        os.chmod(key, 0o600)
        self._write_conf()
        self._spawn("munged", [
            t["munged"], "-F", "-f", "-S", str(self.munge_socket), f"--key-file={key}",
            f"--pid-file={self.root / 'munge' / 'munged.pid'}",
            f"--log-file={self.logs / 'munged.log'}",
            f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
        _wait(lambda: self.munge_socket.exists() or self._died("munged"), timeout, "munged")
        self._check_alive("munged")
        self._spawn("slurmctld", [t["slurmctld"], "-D", "-i", "-f", str(self.conf)])
        _wait(lambda: _port_open(self.ctld_port) or self._died("slurmctld"), timeout,
              "slurmctld's port")
        self._check_alive("slurmctld")
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", [t["slurmd"], "-D", "-f", str(self.conf), "-N", node])
        _wait(self._all_up, timeout, "every slurmd registered")
        return self

    def _died(self, name: str) -> bool:
        return self.procs[name].poll() is not None

    def _check_alive(self, name: str) -> None:
        if self._died(name):
            out = (self.logs / f"{name}.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {self.procs[name].returncode}: {out}")

    def _all_up(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                self._check_alive(name)
        try:
            views = self.nodes_view()
        except subprocess.SubprocessError:
            return False
        return len(views) == len(self.nodes) and all(
            not v.state.endswith("*") and not v.state.startswith(("unk", "down"))
            for v in views.values())

    def stop(self) -> None:
        """SIGTERM every daemon by its PID (slurmd first), SIGKILL what lingers."""
        order = [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for name in order:
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- reading and acting as an admin ----------------------------------------------------

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.tools[tool], *args], capture_output=True, text=True,
                              env=self.env, timeout=60, check=False)

    def nodes_view(self) -> dict[str, NodeView]:
        done = self.run("sinfo", "-N", "-h", "-o", "%N|%T|%H|%E")
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip())
        out: dict[str, NodeView] = {}
        for line in done.stdout.splitlines():
            name, state, when, reason = line.split("|", 3)
            out[name] = NodeView(name, state, "" if reason == "none" else reason, when)
        return out

    def node(self, name: str) -> NodeView:
        return self.nodes_view()[name]

    def show_node(self, name: str) -> str:
        """``scontrol show node NAME`` as text (the Reason there carries ``[user@time]``)."""
        return self.run("scontrol", "show", "node", name).stdout

    def admin_drain(self, name: str, reason: str) -> None:
        done = self.run("scontrol", "update", f"NodeName={name}", "State=DRAIN",
                        f"Reason={reason}")
        assert done.returncode == 0, done.stderr

    def admin_resume(self, name: str) -> None:
        done = self.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
        assert done.returncode == 0, done.stderr
