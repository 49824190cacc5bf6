"""The shipped systemd unit and logrotate file.

The unit is verified by ``systemd-analyze verify`` (no warnings at all: an unknown key is only a
warning with exit status 0) and must score an exposure of 2.0 or less in
``systemd-analyze security --offline=yes`` while keeping what the daemon needs: notify and the
watchdog, read-only logs, the journal group and /dev/kmsg.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.daemon import free_port, wait_for, wait_started
from support.debian import require

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "sigwatch.service"
LOGROTATE = REPO / "deploy" / "logrotate" / "sigwatch"
MAX_EXPOSURE = 2.0


def unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's entry point (verify checks it)."""
    entry = Path(sys.executable).parent / "sigwatch"
    assert entry.exists()
    path = tmp_path / "sigwatch.service"
    path.write_text(UNIT.read_text().replace("/opt/sigwatch/bin/sigwatch", str(entry)))
    return path


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require("systemd-analyze"), *args], capture_output=True, text=True,
                          check=False, timeout=120)


def settings() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_systemd_analyze_verify_finds_nothing(tmp_path: Path) -> None:
    result = analyze("verify", str(unit_here(tmp_path)))
    assert 0 == result.returncode, result.stderr
    assert "" == result.stderr.strip()


def test_the_unit_exposure_is_at_most_2_0(tmp_path: Path) -> None:
    unit = unit_here(tmp_path)
    result = analyze("security", "--offline=yes", f"--threshold={int(MAX_EXPOSURE * 10)}",
                     str(unit))
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert found, result.stdout + result.stderr
    exposure = float(found.group(1))
    print(f"systemd-analyze security --offline=yes: exposure {exposure}")
    assert exposure <= MAX_EXPOSURE
    assert 0 == result.returncode


def test_the_threshold_check_fails_an_unhardened_unit(tmp_path: Path) -> None:
    """The check above can fail: the same unit without its hardening block scores over 2.0."""
    text = unit_here(tmp_path).read_text()
    bare = "\n".join(line for line in text.splitlines()
                     if not line.startswith(("Protect", "Private", "Restrict", "SystemCall",
                                             "Capability", "NoNewPrivileges")))
    path = tmp_path / "bare" / "sigwatch.service"
    path.parent.mkdir()
    path.write_text(bare)
    result = analyze("security", "--offline=yes", f"--threshold={int(MAX_EXPOSURE * 10)}",
                     str(path))
    assert 0 != result.returncode


def test_the_unit_keeps_notify_the_watchdog_and_access_to_logs_journal_and_kmsg() -> None:
    s = settings()
    assert ["notify"] == s["Type"]
    assert s["WatchdogSec"] and int(s["WatchdogSec"][0]) > 0
    assert ["/bin/kill -HUP $MAINPID"] == s["ExecReload"]
    groups = " ".join(s["SupplementaryGroups"]).split()
    assert "systemd-journal" in groups and "adm" in groups
    assert ["/dev/kmsg"] == s["BindReadOnlyPaths"]
    assert ["/dev/kmsg r"] == s["DeviceAllow"]
    assert ["CAP_SYSLOG"] == s["AmbientCapabilities"] == s["CapabilityBoundingSet"]
    assert "ProtectKernelLogs" not in s  # it would hide /dev/kmsg
    assert ["read-only"] == s["ProtectHome"]  # training logs under /home stay readable
    assert ["strict"] == s["ProtectSystem"]
    # SIGHUP reloads patterns and reopens the event log; RestartPreventExitStatus = config error
    assert ["2"] == s["RestartPreventExitStatus"]


def test_logrotate_accepts_the_shipped_file(tmp_path: Path) -> None:
    conf = tmp_path / "sigwatch"
    conf.write_text(LOGROTATE.read_text().replace(
        "/var/log/sigwatch/events.jsonl", str(tmp_path / "events.jsonl")))
    result = subprocess.run([require("logrotate"), "--debug", "--state",
                             str(tmp_path / "state"), str(conf)],
                            capture_output=True, text=True, check=False, timeout=60)
    assert 0 == result.returncode, result.stderr
    assert "error" not in result.stderr.lower(), result.stderr


def test_logrotate_renames_the_event_log_and_signals_the_daemon(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text('{"event_id": "a"}\n')
    marker = tmp_path / "hup"
    conf = tmp_path / "sigwatch"
    conf.write_text(LOGROTATE.read_text()
                    .replace("/var/log/sigwatch/events.jsonl", str(events))
                    .replace("systemctl kill --signal=HUP --kill-whom=main sigwatch.service",
                             f"touch {marker}"))
    result = subprocess.run([require("logrotate"), "--force", "--state",
                             str(tmp_path / "state"), str(conf)],
                            capture_output=True, text=True, check=False, timeout=60)
    assert 0 == result.returncode, result.stderr
    assert (tmp_path / "events.jsonl.1").read_text() == '{"event_id": "a"}\n'
    assert not events.exists()
    assert marker.exists()


def test_after_sighup_the_daemon_writes_events_to_a_new_file_at_the_path(
        tmp_path: Path, daemon) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    train = logs / "train.log"
    train.write_text("")
    events = tmp_path / "events.jsonl"
    port = free_port()
    d = daemon("--watch", str(logs / "*.log"), "--events", str(events), "--listen",
               f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"), "--no-console")
    wait_started(port)
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    with train.open("a") as fh:
        fh.write(line)
    wait_for(lambda: events.exists() and events.read_text().strip(), what="the first event")
    events.rename(tmp_path / "events.jsonl.1")
    d.signal(signal.SIGHUP)
    with train.open("a") as fh:
        fh.write(line)
    wait_for(lambda: events.exists() and events.read_text().strip(), what="an event in a new file")
    assert 1 == len((tmp_path / "events.jsonl.1").read_text().splitlines())

