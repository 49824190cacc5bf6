"""The daemon's HTTP listener: one WSGI application, an I/O loop and a bounded pool of workers.

A connection gets a worker only once a whole request has arrived. One asyncio loop thread owns
every socket: it accepts, does the TLS handshake (over memory buffers, never blocking), gathers
the request head and body, and writes the answer; the ``workers`` threads only run the
application on requests already in memory. So:

- idle connections (a port scanner, a broken proxy) and slow clients (slowloris) cost a small
  buffer each and no thread; at most ``max_connections`` are open, and one more pushes out
  the one that has waited longest without a whole request, so a scraper always gets in;
- a request has a deadline from accept (TLS handshake included) and an idle timeout between
  bytes: a client too slow gets ``408`` and is closed;
- at most ``workers + queue`` whole requests are in hand; one more gets a quick ``503`` with
  ``Retry-After`` from the loop;
- the certificate and key are re-read when their files change (a rotated certificate needs no
  restart); client certificates are verified as configured; clear-text HTTP on the TLS port is
  told to use https;
- one request per connection (HTTP/1.0 semantics), which is all a scraper and a person with a
  browser need;
- every connection that ends badly is reported through ``on_event`` by a closed set of reasons.

Only the standard library: ``asyncio`` for the loop, ``ssl`` memory BIOs for TLS,
``wsgiref``/``http.server`` to parse the request and call the application. cheroot was
considered and is not used: it hands a new connection to a worker thread before the request
has arrived, and does the TLS handshake on its accepting thread (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import ipaddress
import os
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, cast
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler
from wsgiref.types import WSGIApplication

import structlog

from sigwatch.errors import SigwatchError

__all__ = [
    "BindError",
    "ListenAddress",
    "ListenAddressError",
    "RequestHead",
    "ServerEvent",
    "ServerLimits",
    "TLSConfig",
    "TLSError",
    "Triage",
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
class RequestHead:
    """What the I/O loop knows of a whole request before any worker sees it."""

    method: str
    path: str
    authorization: str | None
    client: str


Triage = Callable[[RequestHead], bytes | None]
"""Answers a request on the I/O loop when that needs no worker (a whole HTTP response), or
None to hand it to one. It must be cheap: the loop waits for it. The application offers it as
``app.triage`` (basic auth refusing guesses past their budget without a worker)."""


def _head_of(request: bytes, client: tuple[Any, ...]) -> RequestHead | None:
    lines = request.split(b"\n", 64)
    parts = lines[0].split()
    if len(parts) < 2:
        return None
    authorization = None
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not line.strip():
            break
        if sep and name.strip().lower() == b"authorization":
            authorization = value.strip().decode("latin-1")
            break
    return RequestHead(parts[0].decode("latin-1").upper(),
                       parts[1].decode("latin-1").split("?", 1)[0], authorization,
                       str(client[0]) if client else "")


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Bounds on threads, queued requests, open connections, sizes and time.

    ``workers`` threads run the application; at most ``queue`` more whole requests wait for
    one (a further request gets a quick ``503``). Connections still sending their request cost
    no thread: at most ``max_connections`` are open, and one more pushes out the one that has
    waited longest without a whole request. ``request_timeout`` bounds the time from accept
    to a whole request (TLS handshake included), and then the writing of the response;
    ``idle_timeout`` bounds each silence within a request.
    """

    workers: int = 8
    queue: int = 16
    request_timeout: float = 30.0
    idle_timeout: float = 10.0
    backlog: int = 64
    max_connections: int = 256
    max_body: int = 1 << 16

    def __post_init__(self) -> None:
        if self.workers < 1 or self.queue < 0 or self.backlog < 1:
            msg = "workers and backlog must be at least 1, queue at least 0"
            raise ValueError(msg)
        if self.max_connections < 1 or self.max_body < 0:
            msg = "max_connections must be at least 1, max_body at least 0"
            raise ValueError(msg)
        if not 0 < self.idle_timeout <= self.request_timeout:
            msg = "need 0 < idle_timeout <= request_timeout"
            raise ValueError(msg)


def _canned(status: str, text: str, extra: str = "") -> bytes:
    body = text.encode("utf-8")
    return (f"HTTP/1.0 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n{extra}"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode("ascii") + body


_BUSY = _canned("503 Service Unavailable", "server busy, retry later.\n", "Retry-After: 1\r\n")
_TIMEOUT = _canned("408 Request Timeout", "request too slow\n")
_PLAIN_ON_TLS = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 b"Connection: close\r\n\r\n"
                 b"This port speaks TLS: use https://, not http://.\n")
_URI_TOO_LONG = _canned("414 URI Too Long", "request line too long\n")
_HEAD_TOO_LARGE = _canned("431 Request Header Fields Too Large", "request head too large\n")
_BODY_TOO_LARGE = _canned("413 Content Too Large", "request body too large\n")
_BAD_LENGTH = _canned("400 Bad Request", "bad Content-Length\n")
_NO_CHUNKED = _canned("411 Length Required", "send a Content-Length, not chunked\n")
_INTERNAL = _canned("500 Internal Server Error", "internal error\n")

_MAX_HEAD = 1 << 16  # request line and headers together
_LINGER_SECONDS = 1.0
_LINGER_BYTES = 1 << 16
_TLS_HANDSHAKE_RECORD = 0x16


class _LogStderr:
    """wsgiref prints handler errors to stderr; collect them for one structured log line."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        return None


class _ServerHandler(ServerHandler):
    server_software = "sigwatch"


class _Gateway:
    """The WSGI side, run by the workers on a request that has arrived whole.

    wsgiref parses the request (``http.server``'s rules and limits) and calls the application;
    the response is collected in memory and handed back to the I/O loop, so a worker never
    waits on the network.
    """

    def __init__(self, app: WSGIApplication, host: str, port: int, *, https: bool) -> None:
        self.app = app
        self.base_environ: dict[str, str] = {
            "SERVER_NAME": host, "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PORT": str(port),
            "REMOTE_HOST": "", "CONTENT_LENGTH": "", "SCRIPT_NAME": ""}
        if https:
            self.base_environ["HTTPS"] = "on"

    def get_app(self) -> WSGIApplication:
        return self.app

    def respond(self, request: bytes, client: tuple[Any, ...]) -> bytes:
        out = io.BytesIO()
        handler = _Handler(self, request, out, client)
        try:
            handler.serve()
        except Exception:
            log.exception("http_worker_error")
            return _INTERNAL
        return out.getvalue()


class _Handler(WSGIRequestHandler):
    """wsgiref's handler over a request already in memory (no socket)."""

    server_version = "sigwatch"
    sys_version = ""

    def __init__(self, gateway: _Gateway, request: bytes, out: io.BytesIO,
                 client: tuple[Any, ...]) -> None:  # no socketserver set-up: no socket
        self.server = cast("Any", gateway)  # get_environ() reads its base_environ
        self._gateway = gateway
        self.client_address = client
        self.rfile = io.BytesIO(request)
        self.wfile = out
        self._stderr = _LogStderr()

    def serve(self) -> None:
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
        handler = _ServerHandler(cast("IO[bytes]", self.rfile), cast("IO[bytes]", self.wfile),
                                 self.get_stderr(), self.get_environ(), multithread=True)
        handler.request_handler = self  # type: ignore[attr-defined] # wsgiref's back-pointer
        handler.run(self._gateway.get_app())
        if self._stderr.parts:
            log.warning("http_handler_error", detail="".join(self._stderr.parts).strip())

    def get_stderr(self) -> Any:
        return self._stderr

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged: a scrape every 15 s would drown the daemon's log."""
        _ = format, args


class _TLSSession:
    """TLS over memory buffers: the I/O loop feeds bytes in and sends what comes out, so a
    handshake never blocks a thread (as asyncio's own SSL transport does it)."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=True)
        self.ready = False

    def feed(self, data: bytes) -> bytes:
        """Take bytes from the network; return the plaintext they complete (may be empty).
        Raises ``ssl.SSLError`` on a failed handshake or a bad record."""
        self._in.write(data)
        if not self.ready:
            try:
                self._obj.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self.ready = True
        out = bytearray()
        while True:
            try:
                chunk = self._obj.read(65536)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                break
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def outgoing(self) -> bytes:
        return self._out.read()

    def encrypt(self, data: bytes) -> bytes:
        view = memoryview(data)
        while view:
            view = view[self._obj.write(view):]
        return self._out.read()

    def close_notify(self) -> bytes:
        with contextlib.suppress(ssl.SSLError):
            self._obj.unwrap()
        return self._out.read()


_State = Literal["reading", "dispatched", "writing", "lingering", "closed"]


class _Connection(asyncio.Protocol):
    """One client connection on the I/O loop: gather a whole request, dispatch it, write the
    answer, half-close and linger briefly (so the client reads the answer, not a reset)."""

    def __init__(self, hub: _Hub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.client: tuple[Any, ...] = ("", 0)
        self.state: _State = "reading"
        self.buf = bytearray()
        self.tls: _TLSSession | None = None
        self.writing_paused = False
        self.lingered = 0
        self._deadline: asyncio.TimerHandle | None = None
        self._idle: asyncio.TimerHandle | None = None

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self.transport.set_write_buffer_limits(high=0)  # pause_writing until drained
        self.client = tuple(transport.get_extra_info("peername") or ("", 0))
        loop = self.hub.loop
        self._deadline = loop.call_later(self.hub.limits.request_timeout, self._too_slow)
        self._arm_idle()
        self.hub.admit(self)

    def data_received(self, data: bytes) -> None:
        if self.state == "lingering":
            self.lingered += len(data)
            if self.lingered > _LINGER_BYTES:
                self._close()
            return
        if self.state != "reading":
            return  # a pipelined request: one request per connection
        self._arm_idle()
        if self.hub.tls is not None:
            plain = self._tls_in(data)
            if plain is None or not plain:
                return
            data = plain
        self.buf += data
        self._check_request()

    def eof_received(self) -> bool:
        if self.state == "reading":
            if self.buf:
                self.hub.note("disconnect")
            self._close()
            return False
        if self.state == "lingering":
            self._close()
            return False
        return True  # half-closed after its request: the answer can still be written

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.state == "writing":
            self._linger()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state in ("reading", "writing") and exc is not None:
            self.hub.note("disconnect")
        self.state = "closed"
        self._cancel_timers()
        self.hub.forget(self)

    # -- reading -------------------------------------------------------------------------------

    def _tls_in(self, data: bytes) -> bytes | None:
        if self.tls is None:
            assert self.hub.tls is not None
            if data[:1] and data[0] != _TLS_HANDSHAKE_RECORD:
                self.hub.note("tls_error")  # as Go's servers do: say why instead of a reset
                self._send(_PLAIN_ON_TLS, encrypt=False)
                self._linger()
                return None
            self.tls = _TLSSession(self.hub.tls.get())
        try:
            plain = self.tls.feed(data)
        except ssl.SSLError as exc:
            self.hub.note("tls_error")
            log.debug("tls_handshake_failed", reason=exc.reason)
            self._send(self.tls.outgoing(), encrypt=False)
            self._close()
            return None
        self._send(self.tls.outgoing(), encrypt=False)
        return plain

    def _check_request(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        size = 4
        if end < 0:
            end, size = self.buf.find(b"\n\n"), 2
        if end < 0:
            if len(self.buf) > _MAX_HEAD:
                first_line = self.buf.find(b"\n", 0, _MAX_HEAD)
                self._refuse(_URI_TOO_LONG if first_line < 0 else _HEAD_TOO_LARGE)
            return
        head_end = end + size
        if head_end > _MAX_HEAD:
            self._refuse(_HEAD_TOO_LARGE)
            return
        length = _body_length(bytes(self.buf[:head_end]))
        if length is None:
            self._refuse(_BAD_LENGTH)
        elif length < 0:
            self._refuse(_NO_CHUNKED)
        elif length > self.hub.limits.max_body:
            self._refuse(_BODY_TOO_LARGE)
        elif len(self.buf) >= head_end + length:
            request = bytes(self.buf[:head_end + length])
            self.buf.clear()
            self.state = "dispatched"
            self._cancel_timers()
            assert self.transport is not None
            self.transport.pause_reading()
            self.hub.dispatch(self, request)

    def _refuse(self, answer: bytes) -> None:
        self.buf.clear()
        self.respond(answer)

    def _too_slow(self) -> None:
        """The request deadline or the idle timeout passed before a whole request."""
        if self.state != "reading":
            return
        self.hub.note("timeout")
        if self.hub.tls is not None and (self.tls is None or not self.tls.ready):
            self._abort()  # no TLS session to say it in
            return
        self.respond(_TIMEOUT)

    def _arm_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = self.hub.loop.call_later(self.hub.limits.idle_timeout, self._too_slow)

    def _cancel_timers(self) -> None:
        for timer in (self._deadline, self._idle):
            if timer is not None:
                timer.cancel()
        self._deadline = self._idle = None

    # -- writing -------------------------------------------------------------------------------

    def respond(self, answer: bytes) -> None:
        """Write ``answer`` (on the loop), then half-close and linger; a client that does not
        read it within the request deadline is cut off."""
        if self.state in ("closed", "writing", "lingering") or self.transport is None:
            return
        self._cancel_timers()
        self.state = "writing"
        self._send(answer, encrypt=self.tls is not None)
        if self.tls is not None:
            self._send(self.tls.close_notify(), encrypt=False)
        self._deadline = self.hub.loop.call_later(self.hub.limits.request_timeout,
                                                  self._write_timeout)
        if not self.writing_paused:
            self._linger()

    def _send(self, data: bytes, *, encrypt: bool) -> None:
        if not data or self.transport is None or self.transport.is_closing():
            return
        if encrypt:
            assert self.tls is not None
            data = self.tls.encrypt(data)
        self.transport.write(data)

    def _write_timeout(self) -> None:
        if self.state in ("writing", "lingering") and self.transport is not None and (
                self.transport.get_write_buffer_size()):
            self.hub.note("timeout")
        self._abort()

    def _linger(self) -> None:
        """Everything written: half-close, read (and drop) what the client still sends for
        a moment, then close. Closing with unread input would make the kernel send a reset
        that can throw the answer away before the client reads it."""
        assert self.transport is not None
        self.state = "lingering"
        if self.transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                self.transport.write_eof()
        with contextlib.suppress(RuntimeError):
            self.transport.resume_reading()
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.hub.loop.call_later(_LINGER_SECONDS, self._close)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _body_length(head: bytes) -> int | None:
    """The Content-Length of a request head: 0 when absent, -1 for a chunked body, None when
    it is malformed or given twice with different values."""
    lengths: set[bytes] = set()
    for line in head.split(b"\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = name.strip().lower()
        if key == b"transfer-encoding":
            return -1
        if key == b"content-length":
            lengths.add(value.strip())
    if not lengths:
        return 0
    if len(lengths) > 1:
        return None
    (text,) = lengths
    if not text.isdigit() or len(text) > 18:
        return None
    return int(text)


class _Hub:
    """The I/O loop's view of the server: the open connections, the requests waiting for a
    worker, and the workers (which only compute; the loop does every read and write)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, gateway: _Gateway,
                 limits: ServerLimits, tls: _ContextCache | None,
                 on_event: Callable[[ServerEvent], None], triage: Triage | None) -> None:
        self.loop = loop
        self.triage = triage
        self.gateway = gateway
        self.limits = limits
        self.tls = tls
        self.on_event = on_event
        self.connections: dict[_Connection, None] = {}  # in the order they were accepted
        self.pending = 0  # requests handed to the workers and not answered yet
        self.work: queue.SimpleQueue[tuple[_Connection, bytes] | None] = queue.SimpleQueue()

    def note(self, event: ServerEvent) -> None:
        try:
            self.on_event(event)
        except Exception:
            log.exception("http_event_callback_failed")

    def admit(self, conn: _Connection) -> None:
        """Keep ``conn``; over ``max_connections``, push out the connection that has waited
        longest without sending a whole request (a slow or idle client, never a request)."""
        self.connections[conn] = None
        if len(self.connections) <= self.limits.max_connections:
            return
        victim = next((c for c in self.connections if c.state == "reading" and c is not conn),
                      conn)
        self.note("busy")
        if victim.tls is not None or self.tls is not None:
            victim._abort()
        else:
            victim.respond(_BUSY)

    def forget(self, conn: _Connection) -> None:
        self.connections.pop(conn, None)

    def dispatch(self, conn: _Connection, request: bytes) -> None:
        if self.triage is not None:
            head = _head_of(request, conn.client)
            answer = None
            if head is not None:
                try:
                    answer = self.triage(head)
                except Exception:
                    log.exception("http_triage_failed")
            if answer is not None:
                conn.respond(answer)
                return
        if self.pending >= self.limits.workers + self.limits.queue:
            self.note("busy")
            conn.respond(_BUSY)
            return
        self.pending += 1
        self.work.put((conn, request))

    def answered(self, conn: _Connection, answer: bytes) -> None:
        self.pending -= 1
        conn.respond(answer)

    def worker(self) -> None:
        while True:
            item = self.work.get()
            if item is None:
                return
            conn, request = item
            answer = self.gateway.respond(request, conn.client)
            with contextlib.suppress(RuntimeError):  # the loop is closed: stopping
                self.loop.call_soon_threadsafe(self.answered, conn, answer)

    def abort_all(self) -> None:
        for conn in list(self.connections):
            conn._abort()


def _listening_socket(address: ListenAddress, backlog: int) -> socket.socket:
    family, sockaddr, dual = _resolve(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise BindError(str(address), _bind_reason(exc), exc.errno) from None
    sock.setblocking(False)
    return sock


class WebServer:
    """Serves one WSGI application on one listen address until ``stop``.

    Construction does nothing; ``start()`` binds (``BindError`` when it cannot) and starts the
    I/O loop thread and the workers. ``stop()`` may be called from any thread, once started.
    """

    def __init__(
        self,
        app: WSGIApplication,
        listen: ListenAddress | str,
        *,
        tls: TLSConfig | None = None,
        limits: ServerLimits | None = None,
        on_event: Callable[[ServerEvent], None] | None = None,
        triage: Triage | None = None,
    ) -> None:
        """``on_event`` is called with "busy", "timeout", "tls_error" or "disconnect" for each
        connection that ended that way (from the I/O loop: keep it cheap). ``triage`` answers
        requests that need no worker; by default the application's ``triage`` if it has one."""
        self.app = app
        self.listen = parse_listen(listen) if isinstance(listen, str) else listen
        self.tls = tls
        self.limits = limits or ServerLimits()
        self._on_event = on_event or (lambda _event: None)
        self._triage: Triage | None = triage or getattr(app, "triage", None)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hub: _Hub | None = None
        self._server: asyncio.Server | None = None
        self._threads: list[threading.Thread] = []
        self._port = 0

    def start(self) -> None:
        """Bind and serve in background threads. Raises ``BindError`` or ``TLSError``."""
        if self._loop is not None:
            msg = "already started"
            raise RuntimeError(msg)
        tls = _ContextCache(self.tls) if self.tls is not None else None
        sock = _listening_socket(self.listen, self.limits.backlog)
        host, port = sock.getsockname()[:2]
        self._port = int(port)
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_loop_error)
        hub = _Hub(loop, _Gateway(self.app, str(host), self._port, https=tls is not None),
                   self.limits, tls, self._on_event, self._triage)
        try:
            self._server = loop.run_until_complete(loop.create_server(
                lambda: _Connection(hub), sock=sock, backlog=self.limits.backlog))
        except OSError as exc:
            loop.close()
            sock.close()
            raise BindError(str(self.listen), _bind_reason(exc), exc.errno) from None
        self._loop, self._hub = loop, hub
        self._threads = [threading.Thread(target=loop.run_forever, name="sigwatch-http-io",
                                          daemon=True)]
        self._threads += [threading.Thread(target=hub.worker, name=f"sigwatch-http-{i}",
                                           daemon=True) for i in range(self.limits.workers)]
        for t in self._threads:
            t.start()
        log.info("http_listening", address=str(self.address),
                 tls=self.tls is not None, workers=self.limits.workers)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, cut open connections, join the threads (at most ``timeout`` s)."""
        loop, hub, server = self._loop, self._hub, self._server
        if loop is None or hub is None or server is None:
            return
        self._loop = self._hub = self._server = None
        end = time.monotonic() + timeout

        def shut() -> None:
            server.close()
            hub.abort_all()
            loop.call_soon(loop.stop)

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(shut)
        for _ in range(self.limits.workers):
            hub.work.put(None)
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        if not self._threads[0].is_alive():
            loop.close()
        self._threads = []

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._loop is None:
            msg = "not started"
            raise RuntimeError(msg)
        return self._port

    def in_hand(self) -> int:
        """Whole requests handed to the workers and not answered yet (for tests)."""
        return 0 if self._hub is None else self._hub.pending

    @property
    def address(self) -> ListenAddress:
        return ListenAddress(self.listen.host, self.port)

    @property
    def threads(self) -> int:
        """Threads this server runs (the I/O loop and the workers): for tests."""
        return len(self._threads)

    def url(self, path: str = "/") -> str:
        """A URL for this server as seen from this host (loopback for all interfaces)."""
        host = self.listen.host or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"


def _loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's errors (a failed accept when out of file descriptors, ...) as one log line."""
    exc = context.get("exception")
    log.warning("http_loop_error", message=str(context.get("message", "")),
                error=None if exc is None else f"{type(exc).__name__}: {exc}")
