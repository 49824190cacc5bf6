"""`sigwatch health`: the running daemon's verdict in one line and an exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.daemon import DaemonProcess, free_port, sample, scrape, wait_for

pytestmark = pytest.mark.integration


def _health(config: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "sigwatch", "health", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "" == done.stderr
    assert 1 == len(done.stdout.splitlines()), done.stdout
    return done.returncode, done.stdout.strip()


def test_health_reports_a_source_that_cannot_read_until_it_can_and_a_stopped_daemon(
        tmp_path: Path) -> None:
    """A pipe source whose path is a regular file is blind: exit 3 naming it (and
    sigwatch_source_up 0); once a FIFO is there, exit 0; after the daemon stops, exit 4."""
    fifo = tmp_path / "job.fifo"
    fifo.write_text("not a pipe\n")
    log = tmp_path / "train.log"
    log.touch()
    port = free_port()
    config = tmp_path / "sigwatch.toml"
    config.write_text(textwrap.dedent(f"""\
        listen = "127.0.0.1:{port}"
        state_dir = "{tmp_path / 'state'}"
        console = false
        [[sources]]
        name = "training"
        paths = ["{log}"]
        [[sources]]
        name = "jobpipe"
        kind = "pipe"
        paths = ["{fifo}"]
        """))
    daemon = DaemonProcess(["--config", str(config)], tmp_path / "daemon.stderr")
    try:
        wait_for(lambda: _health(config)[0] == 3, 120, "health to report the blind source")
        code, line = _health(config)
        assert 3 == code
        assert "source 'jobpipe' cannot read" in line and "not a named pipe" in line
        assert 0.0 == sample(scrape(port), 'sigwatch_source_up{source="jobpipe"}')
        assert 1.0 == sample(scrape(port), 'sigwatch_source_up{source="training"}')

        fifo.unlink()
        os.mkfifo(fifo)
        wait_for(lambda: _health(config)[0] == 0, 120, "health to see the pipe readable")
        code, line = _health(config)
        assert line.startswith("ok: no open fault, 2 source(s) reading")
        assert 1.0 == sample(scrape(port), 'sigwatch_source_up{source="jobpipe"}')
    finally:
        daemon.stop()
    code, line = _health(config)
    assert 4 == code
    assert line.startswith("sigwatch is not running")


def test_health_with_a_config_it_cannot_read_is_a_usage_error(tmp_path: Path) -> None:
    """Exit 2 and the file named on stderr, as every sigwatch command."""
    bad = tmp_path / "bad.toml"
    bad.write_text("state_dir = [\n")
    done = subprocess.run([sys.executable, "-m", "sigwatch", "health", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert 2 == done.returncode
    assert str(bad) in done.stderr and "invalid TOML" in done.stderr
