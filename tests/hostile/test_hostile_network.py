"""Unauthenticated network clients against a real daemon (loopback only): idle connections,
slowloris clients that reconnect, and wrong passwords must never silence the scrapes.

Before: 300 idle TCP connections and ``/metrics`` no longer answered within 10 s (idle
connections held every worker, further ones got 503); 24 slowloris clients that reconnect kept
every probe at 503; 24 clients sending wrong passwords cost a full PBKDF2 each (about 0.2 s of
CPU) and real scrapes got 503. Now a connection gets a worker only once a whole request has
arrived, and failed authentication work is bounded (a per-client budget, a cache of recent
failures; a scraper whose credentials were accepted recently costs nothing).

Each scrape below has a generous bound (a 10 s client timeout, what Prometheus would allow);
no test measures speed.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from support.daemon import wait_for
from support.hostile import Rig

from sigwatch.web.auth import hash_password

pytestmark = pytest.mark.integration

SCRAPE_BOUND = 10.0  # seconds: a Prometheus scrape_timeout, generous on a busy machine


def scrape(port: int, path: str = "/metrics", headers: dict[str, str] | None = None) -> int:
    """The status of one request (any failure to answer within the bound is -1)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=SCRAPE_BOUND) as reply:
            reply.read()
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return -1


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class Crowd:
    """``n`` threads running ``attack(stop)`` until stopped; joined at the end of the test."""

    def __init__(self, n: int, attack: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=attack, args=(self.stop,), daemon=True)
                        for _ in range(n)]
        for t in self.threads:
            t.start()

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


@pytest.fixture(name="crowds")
def _crowds() -> Iterator[list[Crowd]]:
    made: list[Crowd] = []
    yield made
    for crowd in made:
        crowd.end()


def test_300_idle_connections_do_not_silence_the_scrapes(rig: Rig) -> None:
    d = rig.start()
    d.wait_started()
    idle = [socket.create_connection(("127.0.0.1", d.port), timeout=10) for _ in range(300)]
    try:
        statuses = [scrape(d.port) for _ in range(5)]
        health = scrape(d.port, "/-/healthy")
    finally:
        for sock in idle:
            sock.close()

    assert [200] * 5 == statuses
    assert 200 == health
    assert d.alive()


def test_slowloris_clients_that_reconnect_never_hold_the_probes(rig: Rig, crowds) -> None:
    """48 clients (twice the old pool of workers and queue) trickle headers and reconnect
    each time they are cut off (408 at the request deadline, shortened here to 3 s so that
    they are cut off many times); probes keep answering 200 all along."""
    d = rig.start(config="[web]\nrequest_timeout = 3.0\nidle_timeout = 2.0\n")
    d.wait_started()
    reconnects = threading.Semaphore(0)

    def slowloris(stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", d.port), timeout=5) as sock:
                    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    sock.settimeout(0.3)  # the pace of the attack: a header line every 0.3 s
                    while not stop.is_set():
                        try:
                            if sock.recv(4096) is not None:  # an answer (408) or the close
                                break
                        except TimeoutError:
                            sock.sendall(b"X-Slow: a\r\n")
            except OSError:
                pass
            reconnects.release()

    crowds.append(Crowd(48, slowloris))
    statuses: list[int] = []
    cut_off = 0
    give_up = time.monotonic() + 120  # a bound for a broken server, never reached otherwise
    while cut_off < 96 and time.monotonic() < give_up:  # until they were cut twice over
        statuses.append(scrape(d.port, "/-/healthy" if len(statuses) % 2 else "/metrics"))
        if reconnects.acquire(timeout=0.05):  # paces the probes on the attackers' cut-offs
            cut_off += 1
        while reconnects.acquire(blocking=False):
            cut_off += 1

    assert 96 <= cut_off
    assert [200] * len(statuses) == statuses
    assert d.alive()


def test_wrong_passwords_do_not_starve_a_scraper_that_authenticated(rig: Rig, crowds) -> None:
    """24 clients send wrong passwords (each different, so no cache can answer them) while
    Prometheus scrapes with its own, accepted credentials: every scrape is answered."""
    digest = hash_password("right horse battery")
    d = rig.start(config=f'[web.basic_auth_users]\nprometheus = "{digest}"\n')
    good = basic("prometheus", "right horse battery")
    # Prometheus was scraping before the attack.
    wait_for(lambda: scrape(d.port, headers=good) == 200, timeout=30, what="a first scrape")
    attempts = threading.Semaphore(0)

    def guesser(stop: threading.Event) -> None:
        while not stop.is_set():
            scrape(d.port, headers=basic("prometheus", os.urandom(8).hex()))
            attempts.release()

    crowds.append(Crowd(24, guesser))
    statuses = []
    for _ in range(10):
        statuses.append(scrape(d.port, headers=good))
    for _ in range(200):  # the attack really ran: 200 wrong guesses were answered
        assert attempts.acquire(timeout=60)

    assert [200] * 10 == statuses
    assert d.alive()


