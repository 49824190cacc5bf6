#!/usr/bin/env python3
"""How fast ``sigwatch health`` answers, beside peers measured in the same run.

    .venv/bin/python bench/health.py [--repeat 30]
    (also part of bench/run_bench.py's daemon section)

A real ``sigwatch run`` is started on a temporary config; ``sigwatch health --config FILE`` is
then run ``--repeat`` times as a new process each time (as Slurm's HealthCheckProgram, a prolog
or an epilog would run it) in three states: healthy, a node fault open (act mode, no
scheduler), and no daemon at all. The peers, each a new process too: the Python interpreter
doing nothing (``python3 -c pass``: the floor of any Python one-shot), ``sigwatch --version``
(the CLI's own start-up) and a one-shot Python HTTP GET of the daemon's ``/-/healthy`` (what
asking the daemon over HTTP would cost). Absolute figures depend on the machine's load; the
ratios to the peers are what carry over.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PY = sys.executable
LINE = ("{stamp} bench kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=python3, "
        "GPU has fallen off the bus.\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _times(cmd: list[str], repeat: int) -> dict[str, float]:
    walls = []
    codes = set()
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, check=False)
        walls.append(time.perf_counter() - started)
        codes.add(done.returncode)
    walls.sort()
    return {"p50_ms": round(statistics.median(walls) * 1000, 1),
            "p90_ms": round(walls[int(0.9 * (len(walls) - 1))] * 1000, 1),
            "max_ms": round(walls[-1] * 1000, 1), "exit": sorted(codes)[0]}


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def measure_health(work: Path, repeat: int = 30) -> dict[str, object]:
    """Start a daemon in ``work`` and time ``sigwatch health`` against it and its peers."""
    work.mkdir(parents=True, exist_ok=True)
    kern = work / "kern.log"
    kern.touch()
    port = _free_port()
    config = work / "sigwatch.toml"
    config.write_text(textwrap.dedent(f"""\
        listen = "127.0.0.1:{port}"
        state_dir = "{work / 'state'}"
        console = false
        [[sources]]
        name = "kernel"
        paths = ["{kern}"]
        content = "kernel"
        [policy]
        mode = "act"
        boot_id_path = "{work / 'boot_id'}"
        """))
    (work / "boot_id").write_text("bench-boot\n")
    health = [PY, "-m", "sigwatch", "health", "--config", str(config)]

    def code() -> int:
        return subprocess.run(health, capture_output=True, check=False).returncode

    err = open(work / "daemon.stderr", "wb")  # noqa: SIM115
    proc = subprocess.Popen([PY, "-m", "sigwatch", "run", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=err)
    out: dict[str, object] = {}
    try:
        _wait(lambda: code() == 0, 180, "the daemon's first verdict")
        out["python -c pass (peer)"] = _times([PY, "-c", "pass"], repeat)
        out["sigwatch --version (peer)"] = _times([PY, "-m", "sigwatch", "--version"], repeat)
        get = ("import urllib.request;urllib.request.urlopen("
               f"'http://127.0.0.1:{port}/-/healthy',timeout=5).read()")
        out["HTTP GET /-/healthy, one-shot python (peer)"] = _times([PY, "-c", get], repeat)
        out["sigwatch health: healthy"] = _times(health, repeat)
        stamp = time.strftime("%b %e %H:%M:%S")
        with kern.open("a") as fh:
            fh.write(LINE.format(stamp=stamp))
        _wait(lambda: code() == 1, 120, "the fault in the verdict")
        out["sigwatch health: fault open"] = _times(health, repeat)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        err.close()
    out["sigwatch health: no daemon"] = _times(health, repeat)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    with tempfile.TemporaryDirectory(prefix="sigwatch-health-") as tmp:
        figures = measure_health(Path(tmp), args.repeat)
    print(f"sigwatch health answer time, {args.repeat} runs each (new process every time):")
    for name, fig in figures.items():
        print(f"  {name:46s} {json.dumps(fig)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
