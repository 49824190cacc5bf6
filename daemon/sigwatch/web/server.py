"""The daemon's HTTP listener: one WSGI application behind a bounded pool of worker threads.

``prometheus_client.start_http_server`` starts one thread per connection with no limit and lets a
client that sends half a request hold its thread forever. This server instead:

- runs ``workers`` threads and admits at most ``workers + queue`` connections at a time; one more
  gets a quick ``503`` (with ``Retry-After``) from a single rejecting thread, so a flood of idle
  connections never creates threads;
- gives every connection a deadline for the whole exchange (TLS handshake, request, response)
  and a shorter idle timeout for each read or write, so a slow client (slowloris) is cut off
  with a ``408`` and its worker is free again;
- does TLS on the worker, not on the accepting thread, with the certificate and key re-read when
  their files change (a rotated certificate needs no restart);
- serves one request per connection (HTTP/1.0 semantics), which is all a scraper and a person
  with a browser need, and keeps the accounting simple;
- reports the bound port (port 0 picks a free one, for tests) and starts and stops from any
  thread.

Only the standard library: ``socketserver`` and ``wsgiref`` do the parsing and the WSGI calls.
"""

from __future__ import annotations

import contextlib
import errno
import io
import ipaddress
import os
import queue
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer
from wsgiref.types import WSGIApplication

import structlog

from sigwatch.errors import SigwatchError

__all__ = [
    "BindError",
    "ListenAddress",
    "ListenAddressError",
    "ServerEvent",
    "ServerLimits",
    "TLSConfig",
    "TLSError",
    "WebServer",
    "build_ssl_context",
    "check_bind",
    "parse_listen",
]

log = structlog.get_logger("sigwatch.web")

ServerEvent = Literal["busy", "timeout", "tls_error", "disconnect"]
"""Why a connection ended badly (a closed set, usable as a metric label)."""


# -- listen addresses --------------------------------------------------------------------------


class ListenAddressError(SigwatchError, ValueError):
    """A listen address that is not ``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT``."""


class BindError(SigwatchError):
    """The listener could not be opened (port in use, address not on this host, permission).

    ``str(error)`` is one line for the operator: ``cannot listen on 127.0.0.1:9750: address
    already in use``; the CLI prints it and exits with status 2.
    """

    def __init__(self, address: str, reason: str, err: int | None = None) -> None:
        self.address = address
        self.reason = reason
        self.errno = err
        super().__init__(f"cannot listen on {address}: {reason}")


class TLSError(SigwatchError):
    """The TLS certificate, key or CA file cannot be used."""


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """Where to listen. ``host`` empty means every interface (IPv6 and IPv4 where possible)."""

    host: str
    port: int

    @property
    def all_interfaces(self) -> bool:
        return self.host == ""

    @property
    def is_loopback(self) -> bool:
        """True for ``localhost`` and loopback addresses: nothing off this host can connect."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.split("%", 1)[0]).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str) -> ListenAddress:
    """Parse ``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (all interfaces, as Prometheus does).

    Raises ``ListenAddressError`` with a message that says which form is expected.
    """
    usage = "must be HOST:PORT, [IPv6]:PORT or :PORT (all interfaces)"
    value = text.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1:end + 2] != ":":
            msg = f"{text!r}: {usage}"
            raise ListenAddressError(msg)
        host, port_text = value[1:end], value[end + 2:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            msg = f"{text!r}: {host!r} is not an IPv6 address"
            raise ListenAddressError(msg) from None
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            msg = f"{text!r}: {usage}"
            raise ListenAddressError(msg)
        if ":" in host:
            msg = f"{text!r}: an IPv6 address needs brackets, for example [::1]:9750"
            raise ListenAddressError(msg)
        if host and not _valid_hostname(host):
            msg = f"{text!r}: {host!r} is not a host name or address"
            raise ListenAddressError(msg)
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        msg = f"{text!r}: the port must be a number from 0 to 65535"
        raise ListenAddressError(msg)
    return ListenAddress(host, int(port_text))


def _valid_hostname(host: str) -> bool:
    if len(host) > 253 or not host.isascii():
        return False
    return all(part and len(part) <= 63 and part.replace("-", "").isalnum()
               for part in host.split("."))


def _resolve(address: ListenAddress) -> tuple[socket.AddressFamily, tuple[Any, ...], bool]:
    """(family, sockaddr, dual_stack) for ``address``; raises ``BindError`` if it cannot."""
    if address.all_interfaces:
        if socket.has_dualstack_ipv6():
            return socket.AF_INET6, ("::", address.port), True
        return socket.AF_INET, ("0.0.0.0", address.port), False
    try:
        infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BindError(str(address), f"cannot resolve {address.host!r}: {exc.strerror}") from None
    family, _type, _proto, _name, sockaddr = infos[0]
    return family, sockaddr, False


def _bind_reason(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return "address already in use (is another sigwatch or exporter running?)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "address not available on this host"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    return (exc.strerror or str(exc)).lower()


def check_bind(address: ListenAddress | str) -> None:
    """Bind and close at once: ``check-config`` uses it to prove the listener can open."""
    addr = parse_listen(address) if isinstance(address, str) else address
    family, sockaddr, dual = _resolve(addr)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(sockaddr)
    except OSError as exc:
        raise BindError(str(addr), _bind_reason(exc), exc.errno) from None
    finally:
        sock.close()


# -- TLS -----------------------------------------------------------------------------------------


ClientAuthType = Literal["NoClientCert", "RequireAndVerifyClientCert", "VerifyClientCertIfGiven"]


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """exporter-toolkit's ``tls_server_config``, the subset sigwatch supports.

    ``client_auth_type`` names follow exporter-toolkit (Go's ``tls.ClientAuthType``).
    """

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: ClientAuthType = "NoClientCert"
    min_version: Literal["TLS12", "TLS13"] = "TLS12"


def build_ssl_context(config: TLSConfig) -> ssl.SSLContext:
    """A server context from the files; raises ``TLSError`` naming the file at fault."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = (ssl.TLSVersion.TLSv1_3 if config.min_version == "TLS13"
                           else ssl.TLSVersion.TLSv1_2)
    for name in ("cert_file", "key_file", "client_ca_file"):
        path = getattr(config, name)
        if path is None:
            continue
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            msg = f"TLS: cannot read {name} {path}: {(exc.strerror or str(exc)).lower()}"
            raise TLSError(msg) from None
    try:
        ctx.load_cert_chain(config.cert_file, config.key_file)
    except ssl.SSLError as exc:
        msg = (f"TLS: {config.cert_file} and {config.key_file} are not a matching PEM "
               f"certificate and key ({exc.reason or exc})")
        raise TLSError(msg) from None
    except OSError as exc:
        msg = f"TLS: cannot read {config.cert_file} or {config.key_file}: {exc.strerror}"
        raise TLSError(msg) from None
    if config.client_auth_type != "NoClientCert":
        if config.client_ca_file is None:
            msg = f"TLS: client_auth_type {config.client_auth_type} needs client_ca_file"
            raise TLSError(msg)
        try:
            ctx.load_verify_locations(cafile=config.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            msg = f"TLS: cannot use client_ca_file {config.client_ca_file}: {exc}"
            raise TLSError(msg) from None
        ctx.verify_mode = (ssl.CERT_REQUIRED
                           if config.client_auth_type == "RequireAndVerifyClientCert"
                           else ssl.CERT_OPTIONAL)
    return ctx


class _ContextCache:
    """Rebuilds the SSL context when a certificate, key or CA file changes on disk."""

    def __init__(self, config: TLSConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._ctx = build_ssl_context(config)

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        files = [self._config.cert_file, self._config.key_file]
        if self._config.client_ca_file is not None:
            files.append(self._config.client_ca_file)
        out = []
        for f in files:
            try:
                st = os.stat(f)
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((0, 0, 0))
        return tuple(out)

    def get(self) -> ssl.SSLContext:
        stamp = self._stat()
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._ctx = build_ssl_context(self._config)
                    log.info("tls_certificate_reloaded", cert_file=str(self._config.cert_file))
                except TLSError as exc:
                    log.error("tls_certificate_reload_failed", error=str(exc))
            return self._ctx


# -- the server -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Bounds on threads, queued connections and time.

    ``request_timeout`` bounds one connection from accept to the last byte of the response;
    ``idle_timeout`` bounds each single read or write within it.
    """

    workers: int = 8
    queue: int = 16
    request_timeout: float = 30.0
    idle_timeout: float = 10.0
    backlog: int = 64

    def __post_init__(self) -> None:
        if self.workers < 1 or self.queue < 0 or self.backlog < 1:
            msg = "workers and backlog must be at least 1, queue at least 0"
            raise ValueError(msg)
        if not 0 < self.idle_timeout <= self.request_timeout:
            msg = "need 0 < idle_timeout <= request_timeout"
            raise ValueError(msg)


_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 26\r\n\r\n"
         b"server busy, retry later.\n")
_TIMEOUT = (b"HTTP/1.0 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Connection: close\r\nContent-Length: 17\r\n\r\nrequest too slow\n")
_PLAIN_ON_TLS = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 b"Connection: close\r\n\r\n"
                 b"This port speaks TLS: use https://, not http://.\n")
_REJECT_SECONDS = 1.0
_TLS_HANDSHAKE_RECORD = 0x16


class _PlainHTTPOnTLSError(OSError):
    """A client spoke clear-text HTTP to the TLS listener (it was told so)."""


class _DeadlineIO(io.RawIOBase):
    """A socket as a raw stream whose reads and writes respect the connection's deadline."""

    def __init__(self, sock: socket.socket, deadline: float, idle: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self._idle = idle
        self.written = 0

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            msg = "connection deadline passed"
            raise TimeoutError(msg)
        self._sock.settimeout(min(self._idle, left))

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._arm()
        return self._sock.recv_into(buffer)

    def write(self, data: Any) -> int:
        view = memoryview(data)
        total = len(view)
        while view:
            self._arm()
            sent = self._sock.send(view)
            view = view[sent:]
            self.written += sent
        return total


class _LogStderr:
    """wsgiref prints handler errors to stderr; collect them for one structured log line."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        return None


class _Handler(WSGIRequestHandler):
    """wsgiref's handler, reading and writing through the deadline-aware stream."""

    server: _PooledServer
    server_version = "sigwatch"
    sys_version = ""
    _raw: _DeadlineIO
    _stderr: _LogStderr

    def setup(self) -> None:
        conn: _Connection = self.request
        self.connection = conn.sock
        self._raw = _DeadlineIO(conn.sock, conn.deadline, self.server.limits.idle_timeout)
        self.rfile = io.BufferedReader(self._raw, 8192)
        self.wfile = self._raw  # type: ignore[assignment]
        self._stderr = _LogStderr()

    def handle(self) -> None:
        try:
            self._handle_one()
        except TimeoutError:
            self.server.note("timeout")
            if self._raw.written == 0:
                with contextlib.suppress(OSError):
                    self.connection.settimeout(0.5)
                    self.connection.sendall(_TIMEOUT)
        except (ConnectionError, ssl.SSLError):
            self.server.note("disconnect")

    def _handle_one(self) -> None:
        """``WSGIRequestHandler.handle`` with our ``ServerHandler`` (no version banner)."""
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.requestline = ""
            self.request_version = ""
            self.command = ""
            self.send_error(414)
            return
        if not self.parse_request():
            return
        handler = _ServerHandler(cast("IO[bytes]", self.rfile), cast("IO[bytes]", self._raw),
                                 self.get_stderr(),
                                 self.get_environ(), multithread=True)
        handler.request_handler = self  # type: ignore[attr-defined] # wsgiref's back-pointer
        handler.run(self.server.get_app())  # type: ignore[arg-type]

    def finish(self) -> None:
        if self._stderr.parts:
            log.warning("http_handler_error", detail="".join(self._stderr.parts).strip())

    def get_stderr(self) -> Any:
        return self._stderr

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: a scrape every 15 s would drown the daemon's log."""
        _ = format, args


class _ServerHandler(ServerHandler):
    server_software = "sigwatch"


@dataclass(slots=True)
class _Connection:
    sock: socket.socket
    deadline: float


class _PooledServer(WSGIServer):
    """``WSGIServer`` whose ``process_request`` queues to a fixed pool instead of a thread."""

    allow_reuse_address = True

    def __init__(self, family: socket.AddressFamily, sockaddr: tuple[Any, ...], *,
                 dual_stack: bool, limits: ServerLimits, tls: _ContextCache | None,
                 on_event: Callable[[ServerEvent], None]) -> None:
        self.address_family = family
        self.request_queue_size = limits.backlog
        self.limits = limits
        self.tls = tls
        self.on_event = on_event
        self._dual_stack = dual_stack
        self._slots = threading.BoundedSemaphore(limits.workers + limits.queue)
        self._work: queue.SimpleQueue[tuple[socket.socket, Any] | None] = queue.SimpleQueue()
        self._reject: queue.Queue[socket.socket | None] = queue.Queue(maxsize=limits.queue + 8)
        self._active: set[socket.socket] = set()
        self._active_lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        super().__init__(sockaddr, _Handler, bind_and_activate=True)

    def server_bind(self) -> None:
        """Bind without ``getfqdn()``: a DNS lookup at start-up hangs on an offline node."""
        if self._dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()

    def note(self, event: ServerEvent) -> None:
        try:
            self.on_event(event)
        except Exception:
            log.exception("http_event_callback_failed")

    # -- accepting thread ----------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots.acquire(blocking=False):
            self._work.put((request, client_address))
            return
        self.note("busy")
        try:
            self._reject.put_nowait(request)
        except queue.Full:
            request.close()

    def start_threads(self) -> None:
        for i in range(self.limits.workers):
            t = threading.Thread(target=self._worker, name=f"sigwatch-http-{i}", daemon=True)
            t.start()
            self.threads.append(t)
        t = threading.Thread(target=self._rejecter, name="sigwatch-http-busy", daemon=True)
        t.start()
        self.threads.append(t)

    def stop_threads(self, timeout: float) -> None:
        self._stopping.set()  # queued connections are closed, not served
        for _ in range(self.limits.workers):
            self._work.put(None)
        self._reject.put(None)
        with self._active_lock:
            for sock in self._active:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))

    # -- workers -------------------------------------------------------------------------------

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            sock, address = item
            try:
                if self._stopping.is_set():
                    _close(sock)
                else:
                    self._serve(sock, address)
            finally:
                self._slots.release()

    def _serve(self, sock: socket.socket, address: Any) -> None:
        conn = _Connection(sock, time.monotonic() + self.limits.request_timeout)
        with self._active_lock:
            self._active.add(sock)
        try:
            if self.tls is not None:
                conn.sock = self._handshake(sock, conn.deadline)
                with self._active_lock:
                    self._active.add(conn.sock)
            _Handler(cast("socket.socket", conn), address, self)  # setup() unpacks it
        except TimeoutError:
            self.note("timeout")
        except ssl.SSLError as exc:
            self.note("tls_error")
            log.debug("tls_handshake_failed", reason=exc.reason)
        except _PlainHTTPOnTLSError:
            self.note("tls_error")
        except OSError:
            self.note("disconnect")
        except Exception:
            log.exception("http_worker_error")
        finally:
            with self._active_lock:
                self._active.discard(sock)
                self._active.discard(conn.sock)
            _linger_close(conn.sock, conn.deadline)

    def _handshake(self, sock: socket.socket, deadline: float) -> socket.socket:
        assert self.tls is not None
        sock.settimeout(min(self.limits.idle_timeout, max(0.01, deadline - time.monotonic())))
        first = sock.recv(1, socket.MSG_PEEK)
        if first and first[0] != _TLS_HANDSHAKE_RECORD:
            sock.sendall(_PLAIN_ON_TLS)  # as Go's servers do: say why instead of a reset
            raise _PlainHTTPOnTLSError
        tls_sock = self.tls.get().wrap_socket(sock, server_side=True,
                                              do_handshake_on_connect=False)
        try:
            tls_sock.settimeout(min(self.limits.idle_timeout,
                                    max(0.01, deadline - time.monotonic())))
            tls_sock.do_handshake()
        except BaseException:
            _close(tls_sock)  # wrap_socket took over the descriptor: close it here
            raise
        return tls_sock

    def _rejecter(self) -> None:
        """Tell a connection over the limit to come back: a 503 within one second, then close.

        The request is read (and discarded) before closing, so the client's kernel does not
        answer our close with a reset that would throw the 503 away.
        """
        while True:
            sock = self._reject.get()
            if sock is None:
                return
            if self._stopping.is_set():
                _close(sock)
                continue
            deadline = time.monotonic() + _REJECT_SECONDS
            out = sock
            try:
                if self.tls is not None:
                    out = self._handshake(sock, deadline)
                raw = _DeadlineIO(out, deadline, _REJECT_SECONDS)
                raw.write(_BUSY)
                with contextlib.suppress(OSError):
                    out.shutdown(socket.SHUT_WR)
                buf = bytearray(4096)
                while raw.readinto(buf) > 0:
                    pass
            except (OSError, ssl.SSLError):
                pass
            finally:
                _close(out)


def _linger_close(sock: socket.socket, deadline: float) -> None:
    """Half-close, read what the client still sends (briefly), then close.

    Closing a socket with unread input (a request body we never needed) makes the kernel send a
    reset, and the client can lose the response it has not read yet.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(max(0.01, min(_REJECT_SECONDS, deadline - time.monotonic())))
        left = 1 << 16
        while left > 0:
            data = sock.recv(min(left, 8192))
            if not data:
                break
            left -= len(data)
    except (OSError, ssl.SSLError):
        pass
    finally:
        _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class WebServer:
    """Serves one WSGI application on one listen address until ``stop``.

    Construction does nothing; ``start()`` binds (``BindError`` when it cannot) and starts the
    accepting thread and the workers. ``stop()`` may be called from any thread, once started.
    """

    def __init__(
        self,
        app: WSGIApplication,
        listen: ListenAddress | str,
        *,
        tls: TLSConfig | None = None,
        limits: ServerLimits | None = None,
        on_event: Callable[[ServerEvent], None] | None = None,
    ) -> None:
        """``on_event`` is called with "busy", "timeout", "tls_error" or "disconnect" for each
        connection that ended that way (from the server's threads: keep it cheap)."""
        self.app = app
        self.listen = parse_listen(listen) if isinstance(listen, str) else listen
        self.tls = tls
        self.limits = limits or ServerLimits()
        self._on_event = on_event or (lambda _event: None)
        self._server: _PooledServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve in background threads. Raises ``BindError`` or ``TLSError``."""
        if self._server is not None:
            msg = "already started"
            raise RuntimeError(msg)
        tls = _ContextCache(self.tls) if self.tls is not None else None
        family, sockaddr, dual = _resolve(self.listen)
        try:
            server = _PooledServer(family, sockaddr, dual_stack=dual, limits=self.limits,
                                   tls=tls, on_event=self._on_event)
        except OSError as exc:
            raise BindError(str(self.listen), _bind_reason(exc), exc.errno) from None
        server.set_app(self.app)
        server.start_threads()
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="sigwatch-http-accept", daemon=True)
        self._thread.start()
        log.info("http_listening", address=str(self.address),
                 tls=self.tls is not None, workers=self.limits.workers)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, cut open connections, join the threads (at most ``timeout`` s)."""
        server, self._server = self._server, None
        if server is None:
            return
        stopper = threading.Thread(target=server.shutdown, name="sigwatch-http-stop")
        stopper.start()
        # Wake the accept loop now instead of at its next poll.
        self._poke(int(server.server_address[1]))
        stopper.join(timeout)
        server.server_close()
        server.stop_threads(timeout)
        if self._thread is not None:
            self._thread.join(timeout)

    def _poke(self, port: int) -> None:
        """Connect to ourselves once: the accept loop wakes and sees the stop request."""
        hosts = [self.listen.host] if self.listen.host not in {"", "::", "0.0.0.0"} else [
            "127.0.0.1", "::1"]
        for host in hosts:
            try:
                with socket.create_connection((host, port), 1.0):
                    return
            except OSError:
                continue

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._server is None:
            msg = "not started"
            raise RuntimeError(msg)
        return int(self._server.server_address[1])

    @property
    def address(self) -> ListenAddress:
        return ListenAddress(self.listen.host, self.port)

    @property
    def threads(self) -> int:
        """Threads this server runs (workers, the rejecter, the acceptor): for tests."""
        if self._server is None:
            return 0
        return len(self._server.threads) + 1

    def url(self, path: str = "/") -> str:
        """A URL for this server as seen from this host (loopback for all interfaces)."""
        host = self.listen.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"
