"""Start-up errors are one line and exit status 2; systemd hears READY, STATUS and RELOADING."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sigwatch.cli import main

pytestmark = pytest.mark.integration


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sigwatch", *args], capture_output=True,
                          text=True, timeout=60, env=env, check=False)


def test_a_port_in_use_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _run("run", "--watch", str(tmp_path / "*.log"), "--state-dir",
                      str(tmp_path / "state"), "--listen", f"127.0.0.1:{port}")

    assert 2 == result.returncode
    assert "Traceback" not in result.stderr
    assert [f"sigwatch: cannot listen on 127.0.0.1:{port}: address already in use"] == [
        line.split(" (")[0] for line in result.stderr.splitlines()
        if line.startswith("sigwatch:")]


def test_check_config_reports_every_error_at_once(tmp_path: Path, capsys) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('listen = "nope"\nmax_files = 0\nbogus = 1\n')

    status = main(["check-config", str(config)])
    err = capsys.readouterr().err

    assert 2 == status
    assert 3 == len([line for line in err.splitlines() if line.startswith("sigwatch: ")])
    assert "listen" in err and "max_files" in err and "bogus: unknown key" in err


def test_a_listen_address_of_only_a_port_means_every_interface(tmp_path: Path,
                                                                capsys) -> None:
    config = tmp_path / "all.toml"
    config.write_text(f'listen = ":0"\nstate_dir = "{tmp_path / "state"}"\n')

    assert 0 == main(["check-config", str(config)])


def test_systemd_hears_ready_with_a_status_and_reloading_on_sighup(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(120)
    (tmp_path / "logs").mkdir()
    env = dict(os.environ, NOTIFY_SOCKET=str(path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sigwatch", "run", "--watch", str(tmp_path / "logs" / "*.log"),
         "--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0", "--no-console"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120  # start-up and a reload of the library, on a busy machine

    def until_ready(into: list[str]) -> None:
        while not any(m.startswith("READY=1") for m in into):
            assert time.monotonic() < deadline, f"no READY=1 in {into[-5:]}"
            into.append(sock.recv(4096).decode())

    try:
        messages: list[str] = []
        until_ready(messages)
        ready = next(m for m in messages if m.startswith("READY=1"))
        assert "STATUS=" in ready and "signatures" in ready

        proc.send_signal(signal.SIGHUP)
        after: list[str] = []
        until_ready(after)
        assert any(m.startswith("RELOADING=1\nMONOTONIC_USEC=") for m in after)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        sock.close()
