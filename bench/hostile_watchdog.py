"""Full-size figures for issue 10 case 13: the longest watchdog gap of a real ``sigwatch run``
(observed through a real NOTIFY_SOCKET) when 10,000 new files appear at once, and during a
reload of a very large pattern set. The hostile tests run the same experiments scaled down.

Usage: bench/hostile_watchdog.py [--files 10000] [--signatures 5000] [--daemon-dir DIR]
(``--daemon-dir`` points PYTHONPATH at another copy of ``daemon/``, e.g. the code before the
fix). Prints one line per experiment.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEQ = ('id = "test_error_seq"\ntitle = "Test Error Seq"\nseverity = "error"\n[match]\n'
       "regex = 'ERROR seq=(?P<seq>\\d+)'\nkeywords = [\"ERROR seq=\"]\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Notes:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.pings: list[float] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        threading.Thread(target=self.run, daemon=True).start()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.sock.recv(4096).decode()
            except OSError:
                continue
            if "WATCHDOG=1" in data:
                self.pings.append(time.monotonic())
            if "READY=1" in data:
                self.ready.set()

    def gap(self, since: float, until: float) -> float:
        times = [since, *[t for t in self.pings if since <= t <= until], until]
        return max(b - a for a, b in zip(times, times[1:]))


def metric(port: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return -1.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def events(path: Path) -> int:
    try:
        return sum(1 for line in path.read_bytes().splitlines() if json.loads(line))
    except OSError:
        return 0


def start(tmp: Path, daemon_dir: Path) -> tuple[subprocess.Popen[bytes], int, Notes]:
    port = free_port()
    notes = Notes(tmp / "notify.sock")
    env = dict(os.environ, PYTHONPATH=str(daemon_dir), NOTIFY_SOCKET=str(tmp / "notify.sock"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "sigwatch", "run", "--watch", str(tmp / "logs" / "*.log"),
         "--events", str(tmp / "events.jsonl"), "--state-dir", str(tmp / "state"),
         "--listen", f"127.0.0.1:{port}", "--patterns", str(tmp / "patterns"),
         "--start-at", "beginning", "--no-console"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "wb"))
    if not notes.ready.wait(120):
        raise SystemExit("daemon not ready")
    return proc, port, notes


def files_at_once(count: int, daemon_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        (tmp / "logs").mkdir()
        (tmp / "patterns").mkdir()
        (tmp / "patterns" / "test_error_seq.toml").write_text(SEQ)
        proc, _port, notes = start(tmp, daemon_dir)
        since = time.monotonic()
        for i in range(count):
            (tmp / "logs" / f"job{i:05d}.log").write_bytes(b"ERROR seq=%d x\n" % (i + 1))
        while events(tmp / "events.jsonl") < count and time.monotonic() - since < 1800:
            if proc.poll() is not None:
                raise SystemExit("daemon died")
            time.sleep(0.5)
        until = time.monotonic()
        print(f"{count} new files at once: longest watchdog gap {notes.gap(since, until):.1f} s,"
              f" all {events(tmp / 'events.jsonl')} read in {until - since:.1f} s", flush=True)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        notes.stop.set()


def large_reload(count: int, daemon_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        (tmp / "logs").mkdir()
        gen = tmp / "patterns" / "gen"
        gen.mkdir(parents=True)
        (tmp / "patterns" / "test_error_seq.toml").write_text(SEQ)
        proc, port, notes = start(tmp, daemon_dir)
        for i in range(count):
            (gen / f"gen_sig_{i:05d}.toml").write_text(
                f'id = "gen_sig_{i:05d}"\ntitle = "Gen Sig {i}"\nseverity = "warning"\n'
                f"[match]\nregex = 'gen(?:erated)? failure {i:05d} in (?P<unit>\\w+) at "
                f"[0-9a-f]{{8}}'\n")
        since = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        while metric(port, "sigwatch_patterns_loaded") != count + 1:
            if time.monotonic() - since > 1800 or proc.poll() is not None:
                raise SystemExit("reload did not finish")
            time.sleep(0.5)
        until = time.monotonic()
        print(f"reload of {count} signatures: longest watchdog gap "
              f"{notes.gap(since, until):.1f} s, reload done in {until - since:.1f} s",
              flush=True)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        notes.stop.set()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--signatures", type=int, default=5_000)
    ap.add_argument("--daemon-dir", type=Path, default=REPO / "daemon")
    args = ap.parse_args()
    if args.files:
        files_at_once(args.files, args.daemon_dir)
    if args.signatures:
        large_reload(args.signatures, args.daemon_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
