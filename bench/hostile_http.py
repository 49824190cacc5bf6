"""Scrapes while hostile network clients hold the listener: latency and the daemon's CPU.

Runs the real ``sigwatch run`` on loopback and, for each scenario, 20 scrapes of ``/metrics``
(one every 0.25 s, with basic auth, as Prometheus would) while the attackers run: none (the peer row), 300 idle
connections, 48 slowloris clients that reconnect when cut off, 24 clients sending wrong
passwords. Prints the scrape latencies (median, worst), the scrapes not answered 200 within
10 s, and the daemon's CPU use (cores) during the scenario.

    .venv/bin/python bench/hostile_http.py                      # this tree
    .venv/bin/python bench/hostile_http.py --daemon-dir OLD/daemon   # another tree's code
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PASSWORD = "right horse battery"
# pbkdf2-sha256, 600,000 rounds (the default) of PASSWORD, fixed salt: the bench needs no import
HASH_ROUNDS = 600_000


def _hash() -> str:
    import hashlib
    salt = b"sigwatch-bench-1"
    digest = hashlib.pbkdf2_hmac("sha256", PASSWORD.encode(), salt, HASH_ROUNDS)
    b = lambda x: base64.b64encode(x).decode().rstrip("=").replace("+", ".")  # noqa: E731
    return f"$pbkdf2-sha256${HASH_ROUNDS}${b(salt)}${b(digest)}"


def _basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"prometheus:{password}".encode())
            .decode()}


def _scrape(port: int, headers: dict[str, str]) -> tuple[int, float]:
    started = time.monotonic()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = -1
    return status, time.monotonic() - started


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _idle(port: int, stop: threading.Event, n: int = 300) -> None:
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    stop.wait()
    for s in socks:
        s.close()


def _slowloris(port: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                sock.settimeout(0.3)
                while not stop.is_set():
                    try:
                        sock.recv(4096)
                        break
                    except TimeoutError:
                        sock.sendall(b"X-Slow: a\r\n")
        except OSError:
            pass


def _guesser(port: int, stop: threading.Event) -> None:
    while not stop.is_set():
        _scrape(port, _basic(os.urandom(8).hex()))


SCENARIOS: list[tuple[str, int, Callable[[int, threading.Event], None]]] = [
    ("no attacker (peer)", 0, _idle),
    ("300 idle connections", 1, _idle),
    ("48 slowloris, reconnecting", 48, _slowloris),
    ("24 wrong-password clients", 24, _guesser),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--daemon-dir", type=Path, help="run the daemon from this daemon/ folder")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.daemon_dir:
        env["PYTHONPATH"] = str(args.daemon_dir.resolve())
    print("| scenario | scrapes not 200 | median s | worst s | daemon CPU (cores) |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="sigwatch-bench-http-") as tmp:
        root = Path(tmp)
        (root / "logs").mkdir()
        cfg = root / "sigwatch.toml"
        cfg.write_text(f'[web]\nrequest_timeout = 3.0\nidle_timeout = 2.0\n'
                       f'[web.basic_auth_users]\nprometheus = "{_hash()}"\n')
        for name, count, attack in SCENARIOS:
            port = _free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "sigwatch", "run", "--config", str(cfg),
                 "--watch", str(root / "logs" / "*.log"), "--listen", f"127.0.0.1:{port}",
                 "--state-dir", str(root / f"state-{port}"), "--no-console"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                good = _basic(PASSWORD)
                deadline = time.monotonic() + 60
                while _scrape(port, good)[0] != 200:
                    if time.monotonic() > deadline:
                        raise SystemExit("the daemon did not come up")
                    time.sleep(0.1)
                stop = threading.Event()
                threads = [threading.Thread(target=attack, args=(port, stop), daemon=True)
                           for _ in range(count)]
                for t in threads:
                    t.start()
                time.sleep(2)  # let the attack settle before measuring
                cpu0, wall0 = _cpu(proc.pid), time.monotonic()
                results = []
                for _ in range(20):  # one scrape every 0.25 s: a 5 s window for the CPU figure
                    next_at = time.monotonic() + 0.25
                    results.append(_scrape(port, good))
                    time.sleep(max(0.0, next_at - time.monotonic()))
                cores = (_cpu(proc.pid) - cpu0) / (time.monotonic() - wall0)
                stop.set()
                for t in threads:
                    t.join(15)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            times = [s for _st, s in results]
            bad = sum(1 for st, _s in results if st != 200)
            print(f"| {name} | {bad}/20 | {statistics.median(times):.3f} | {max(times):.2f} "
                  f"| {cores:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
