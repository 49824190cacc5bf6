"""The listener: listen addresses, bind errors, a bounded pool, slow clients cut off, stop."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from prometheus_client import CollectorRegistry
from support.daemon import wait_for
from support.web import request

from sigwatch.errors import SigwatchError
from sigwatch.telemetry.metrics import SelfMetrics
from sigwatch.web.request import text_response
from sigwatch.web.server import (
    BindError,
    ListenAddress,
    ListenAddressError,
    ServerLimits,
    WebServer,
    check_bind,
    parse_listen,
)


def _read_all(sock: socket.socket, limit: float) -> bytes:
    """Everything the server sends until it closes (the socket times out after ``limit``)."""
    sock.settimeout(limit)
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return out
        except ConnectionResetError:
            return out
        if not data:
            return out
        out += data


def _get_once_free(base: str, path: str, timeout: float = 5.0) -> int:
    """GET ``path``, retrying while the server says 503 (busy), as a client honouring
    Retry-After would; the status of the first non-503 answer."""
    deadline = time.monotonic() + timeout
    while True:
        status = request(base, path).status
        if status != 503 or time.monotonic() > deadline:
            return status


class TestParseListen:
    @pytest.mark.parametrize(("text", "expected"), [
        ("127.0.0.1:9750", ListenAddress("127.0.0.1", 9750)),
        (":9750", ListenAddress("", 9750)),
        ("[::1]:9750", ListenAddress("::1", 9750)),
        ("[::]:0", ListenAddress("::", 0)),
        ("localhost:80", ListenAddress("localhost", 80)),
        ("node7.example.org:9750", ListenAddress("node7.example.org", 9750)),
    ], ids=["ipv4", "all-interfaces", "ipv6-loopback", "ipv6-any", "name", "fqdn"])
    def test_accepted_forms(self, text: str, expected: ListenAddress) -> None:
        """HOST:PORT, [IPv6]:PORT and :PORT, as elsewhere in the Prometheus ecosystem."""
        assert expected == parse_listen(text)

    @pytest.mark.parametrize("text", [
        "9750", "::1:9750", "[::1]9750", "[nothex]:1", "host:", "host:99999", "host:-1",
        "bad host:1", "host:９７５０",
    ])
    def test_rejected_forms_say_what_is_expected(self, text: str) -> None:
        """A malformed address is a ListenAddressError (a SigwatchError: exit status 2)."""
        with pytest.raises(ListenAddressError) as err:
            parse_listen(text)

        assert isinstance(err.value, SigwatchError)
        assert repr(text) in str(err.value)

    def test_loopback_is_recognised(self) -> None:
        """Only loopback addresses count as not exposed."""
        assert [True, True, True, False, False] == [
            parse_listen(t).is_loopback
            for t in ("127.0.0.1:1", "[::1]:1", "localhost:1", ":1", "10.1.2.3:1")]


class TestBind:
    def test_port_in_use_is_one_clear_bind_error(self) -> None:
        """Another listener on the port: BindError naming the address and the reason."""
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()
            port = other.getsockname()[1]
            server = WebServer(lambda e, s: [], f"127.0.0.1:{port}")

            with pytest.raises(BindError) as err:
                server.start()

        assert f"cannot listen on 127.0.0.1:{port}: address already in use" in str(err.value)
        assert "\n" not in str(err.value)

    def test_check_bind_reports_an_address_not_on_this_host(self) -> None:
        """check-config can prove the listener opens; a foreign address fails clearly."""
        with pytest.raises(BindError, match="address not available on this host"):
            check_bind("192.0.2.1:9750")

    def test_port_zero_reports_the_bound_port(self, serve) -> None:
        """Port 0 picks a free port, and the server says which."""
        s = serve()

        assert 0 < s.server.port
        assert 200 == request(f"http://127.0.0.1:{s.server.port}", "/metrics").status

    def test_all_interfaces_serves_loopback(self, serve) -> None:
        """':0' listens everywhere: 127.0.0.1 reaches it."""
        s = serve(listen=":0")

        assert s.server.listen.all_interfaces
        assert 200 == request(f"http://127.0.0.1:{s.server.port}", "/metrics").status


class Held:
    """A route whose requests wait until released: workers busy on real requests, on cue."""

    def __init__(self, served) -> None:  # noqa: ANN001
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        served.app.add_route("/hold", self._handler)

    def _handler(self, _request):  # noqa: ANN001, ANN202
        self.entered.release()
        self.release.wait(30)
        return text_response(200, "released\n")

    def send(self, port: int) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
        return sock


def _wait_in_hand(server: WebServer, count: int) -> None:
    wait_for(lambda: server.in_hand() == count, timeout=10, what=f"{count} requests in hand")


class TestBoundedPool:
    def test_requests_beyond_the_pool_get_503_and_no_new_threads(self, serve) -> None:
        """With 2 workers busy and 2 requests queued, further requests get a 503 (from the I/O
        loop, not a thread) and the process runs no more threads than at start."""
        s = serve(limits=ServerLimits(workers=2, queue=2, request_timeout=20, idle_timeout=20))
        held = Held(s)
        threads_at_start = threading.active_count()
        holding = [held.send(s.server.port) for _ in range(4)]
        try:
            for _ in range(2):
                assert held.entered.acquire(timeout=10)
            _wait_in_hand(s.server, 4)
            replies = []
            for _ in range(6):
                with socket.create_connection(("127.0.0.1", s.server.port)) as extra:
                    extra.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    replies.append(_read_all(extra, 10).split(b"\r\n")[0])
            threads_busy = threading.active_count()
            held.release.set()
            answers = [_read_all(sock, 10).split(b"\r\n")[0] for sock in holding]
        finally:
            held.release.set()
            for sock in holding:
                sock.close()

        assert [b"HTTP/1.0 503 Service Unavailable"] * 6 == replies
        assert [b"HTTP/1.0 200 OK"] * 4 == answers
        assert threads_at_start == threads_busy

    def test_idle_and_half_sent_requests_take_no_worker(self, serve) -> None:
        """One worker, no queue: 50 idle connections and one half-sent request wait in the I/O
        loop, and a whole request is served at once (before: 503 until they went)."""
        s = serve(limits=ServerLimits(workers=1, queue=0, request_timeout=20, idle_timeout=20))
        idle = [socket.create_connection(("127.0.0.1", s.server.port)) for _ in range(50)]
        hog = socket.create_connection(("127.0.0.1", s.server.port))
        hog.sendall(b"GET /metrics HTTP/1.1\r\n")
        try:
            status = request(s.base, "/metrics").status
        finally:
            hog.close()
            for sock in idle:
                sock.close()

        assert 200 == status

    def test_the_pool_serves_again_once_requests_finish(self, serve) -> None:
        """A full pool answers 503; once its request is answered the next one is served."""
        s = serve(limits=ServerLimits(workers=1, queue=0, request_timeout=20, idle_timeout=20))
        held = Held(s)
        hog = held.send(s.server.port)
        assert held.entered.acquire(timeout=10)
        busy = request(s.base, "/metrics").status
        held.release.set()
        _read_all(hog, 10)
        hog.close()

        assert (503, 200) == (busy, _get_once_free(s.base, "/metrics"))

    def test_over_max_connections_the_longest_waiting_is_pushed_out(self, serve) -> None:
        """At max_connections, a new connection pushes out the one that has waited longest
        without a whole request (counted as busy): a scraper always gets in."""
        events: list[str] = []
        s = serve(limits=ServerLimits(workers=2, queue=2, request_timeout=20, idle_timeout=20,
                                      max_connections=4), on_event=events.append)
        idle = [socket.create_connection(("127.0.0.1", s.server.port)) for _ in range(4)]
        try:
            status = request(s.base, "/metrics").status
            oldest = _read_all(idle[0], 10)
        finally:
            for sock in idle:
                sock.close()

        assert 200 == status
        assert oldest.startswith(b"HTTP/1.0 503") or oldest == b""
        assert ["busy"] == events


class TestRequestLimits:
    @pytest.mark.parametrize(("raw", "status"), [
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n", b"414"),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n", b"431"),
        (b"POST /api/v1/faults/x/clear HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", b"413"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"411"),
        (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", b"400"),
    ], ids=["long-request-line", "huge-head", "huge-body", "chunked", "two-lengths"])
    def test_oversized_or_ambiguous_requests_are_refused_before_a_worker(
            self, serve, raw: bytes, status: bytes) -> None:
        s = serve()
        with socket.create_connection(("127.0.0.1", s.server.port)) as sock:
            try:
                sock.sendall(raw)
            except OSError:
                pass
            answer = _read_all(sock, 10)

        assert answer.split(b" ")[1] == status

    def test_a_body_is_gathered_before_the_request_is_dispatched(self, serve) -> None:
        """A request whose body arrives in pieces is handed over whole."""
        s = serve()
        seen: list[bytes] = []

        def echo(req):  # noqa: ANN001, ANN202
            length = int(req.environ.get("CONTENT_LENGTH") or 0)
            seen.append(req.environ["wsgi.input"].read(length))
            return text_response(200, "ok\n")

        s.app.add_route("/echo", echo, methods=("POST",))
        with socket.create_connection(("127.0.0.1", s.server.port)) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nhello")
            sock.sendall(b" body")
            answer = _read_all(sock, 10)

        assert answer.startswith(b"HTTP/1.0 200")
        assert [b"hello body"] == seen


class TestSlowClients:
    def test_half_a_request_is_cut_off_after_the_idle_timeout(self, serve) -> None:
        """A client that stops mid-request gets a 408 and is closed."""
        s = serve(limits=ServerLimits(workers=1, queue=0, request_timeout=5, idle_timeout=0.5))
        with socket.create_connection(("127.0.0.1", s.server.port)) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            answer = _read_all(slow, 10)

        assert answer.startswith(b"HTTP/1.0 408 Request Timeout")
        assert 200 == _get_once_free(s.base, "/metrics")

    def test_a_trickling_client_is_cut_off_at_the_request_deadline(self, serve) -> None:
        """Slowloris: one header byte every 0.1 s never trips the idle timeout, but the whole
        request has a deadline, after which the client gets a 408."""
        s = serve(limits=ServerLimits(workers=1, queue=0, request_timeout=1.5, idle_timeout=1))
        done = threading.Event()
        slow = socket.create_connection(("127.0.0.1", s.server.port))

        def trickle() -> None:
            try:
                slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while not done.wait(0.1):  # pacing the attack, not waiting for a result
                    slow.sendall(b"a")
            except OSError:
                return

        writer = threading.Thread(target=trickle)
        writer.start()
        started = time.monotonic()
        try:
            answer = _read_all(slow, 10)
            took = time.monotonic() - started
        finally:
            done.set()
            writer.join()
            slow.close()

        assert answer.startswith(b"HTTP/1.0 408")
        assert 1.4 < took  # not before the deadline
        assert 200 == _get_once_free(s.base, "/metrics")


class TestCounted:
    def test_dropped_connections_are_counted_by_reason(self, serve) -> None:
        """Wired to the catalogue's counter: a 503 counts as busy, a cut-off as timeout; every
        reason exists at zero from the start."""
        registry = CollectorRegistry()
        metrics = SelfMetrics(registry, "test")
        s = serve(limits=ServerLimits(workers=1, queue=0, request_timeout=5, idle_timeout=0.5),
                  registry=registry,
                  on_event=lambda why: metrics.http_connections_dropped.labels(why).inc())
        held = Held(s)
        at_start = {r: registry.get_sample_value("sigwatch_http_connections_dropped_total",
                                                 {"reason": r})
                    for r in ("busy", "timeout", "tls_error", "disconnect")}
        hog = held.send(s.server.port)
        assert held.entered.acquire(timeout=10)
        with socket.create_connection(("127.0.0.1", s.server.port)) as slow:
            slow.sendall(b"GET / HTTP/1.1\r\n")
            with socket.create_connection(("127.0.0.1", s.server.port)) as extra:
                extra.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _read_all(extra, 5).startswith(b"HTTP/1.0 503")
            assert _read_all(slow, 5).startswith(b"HTTP/1.0 408")
        held.release.set()
        hog.close()

        after = {r: registry.get_sample_value("sigwatch_http_connections_dropped_total",
                                              {"reason": r}) for r in ("busy", "timeout")}

        assert {"busy": 0.0, "timeout": 0.0, "tls_error": 0.0, "disconnect": 0.0} == at_start
        assert {"busy": 1.0, "timeout": 1.0} == after


class TestStop:
    def test_stop_returns_promptly_with_connections_open(self, serve) -> None:
        """stop() from another thread cuts idle connections instead of waiting for them."""
        s = serve(limits=ServerLimits(workers=2, queue=2, request_timeout=60, idle_timeout=60))
        port = s.server.port
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        started = time.monotonic()
        stopper = threading.Thread(target=s.server.stop)
        stopper.start()
        stopper.join(10)
        took = time.monotonic() - started
        for sock in idle:
            sock.close()

        assert not stopper.is_alive()
        assert took < 5
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
