"""The daemon's one WSGI application: a route table, security headers, basic auth, and the
operational routes (``/metrics``, ``/-/healthy``, ``/-/ready``).

The status page and its JSON API (``pages.py``, ``api.py``) are mounted on the same table when a
``DetectionStore`` and a ``StatusProvider`` are given; more routes can be added with
``add_route``. Every response carries a strict Content-Security-Policy and the usual hardening
headers; with ``auth`` set, every path (``/metrics`` and the health checks included) needs
credentials, as with exporter-toolkit.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from wsgiref.types import StartResponse, WSGIEnvironment

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder

from sigwatch.clock import Clock, SystemClock
from sigwatch.web import api, pages
from sigwatch.web import faults as faults_web
from sigwatch.web.auth import AuthResult, BasicAuth
from sigwatch.web.render import SECURITY_HEADERS, error_page
from sigwatch.web.request import (
    BadRequestError,
    Request,
    Response,
    json_response,
    parse_query,
    text_response,
)
from sigwatch.web.server import RequestHead
from sigwatch.web.status import Liveness, StatusProvider
from sigwatch.web.store import DetectionStore

__all__ = [
    "Handler",
    "Route",
    "WebApp",
    "register_process_collectors",
]

log = structlog.get_logger("sigwatch.web")

Handler = Callable[[Request], Response]

_READ_METHODS = frozenset({"GET", "HEAD"})


def register_process_collectors(registry: CollectorRegistry) -> None:
    """Add ``process_*`` (CPU, memory, fds, start time) and ``python_info`` to ``registry``.

    The daemon uses its own registry, not prometheus_client's global one, so these standard
    series exist only if the composition root calls this once.
    """
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)


@dataclass(frozen=True, slots=True)
class Route:
    """A path template such as ``/detections/{event_id}`` and the methods it answers."""

    template: str
    pattern: re.Pattern[str]
    methods: frozenset[str]
    handler: Handler


def _compile(template: str) -> re.Pattern[str]:
    out = ""
    for part in re.split(r"(\{[a-z_]+\})", template):
        if part.startswith("{"):
            out += f"(?P<{part[1:-1]}>[^/]+)"
        else:
            out += re.escape(part)
    return re.compile(out)


class WebApp:
    """Routes requests: ``BadRequestError`` becomes 400, any other failure a logged 500."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        liveness: Liveness,
        status: StatusProvider | None = None,
        store: DetectionStore | None = None,
        auth: BasicAuth | None = None,
        clock: Clock | None = None,
        node: str = "",
        incident_window: float = 3600.0,
        faults: faults_web.FaultsProvider | None = None,
    ) -> None:
        """``status`` and ``store`` together mount the status page and the JSON API;
        ``node`` is the node name shown in page titles and headers (``--node``);
        ``incident_window``: seconds without a repeat before an incident is no longer open;
        ``faults`` mounts the node faults' API (``/api/v1/faults``) and their section of the
        status page."""
        self.registry = registry
        self.liveness = liveness
        self.status = status
        self.store = store
        self.auth = auth
        self.clock = clock or SystemClock()
        self.node = node
        self.incident_window = incident_window
        self._routes: list[Route] = []
        self.add_route("/metrics", self._metrics)
        self.add_route("/-/healthy", self._healthy)
        self.add_route("/-/ready", self._ready)
        sections = [faults_web.section_renderer(faults)] if faults is not None else []
        if status is not None and store is not None:
            pages.mount(self, store, status, sections=sections)
            api.mount(self, store, status)
        if faults is not None:
            faults_web.mount(self, faults)

    def add_route(self, template: str, handler: Handler,
                  methods: Iterable[str] = _READ_METHODS) -> None:
        """Answer ``template`` (``{name}`` matches one path segment) with ``handler``."""
        self._routes.append(Route(template, _compile(template), frozenset(methods), handler))

    # -- before a worker ------------------------------------------------------------------------

    def triage(self, head: RequestHead) -> bytes | None:
        """The whole HTTP answer to a request that needs no worker, else None (called by the
        server's I/O loop: cheap). With basic auth, requests without credentials, with a pair
        that failed recently, or past the failed-authentication budget are refused here, so
        guesses never occupy the workers that scrapes need."""
        if self.auth is None:
            return None
        result = self.auth.precheck(head.authorization, head.client)
        if result is None:
            return None
        response = self._refusal(result, api=head.path.startswith("/api/"))
        headers = [("Content-Type", response.content_type),
                   ("Content-Length", str(len(response.body))),
                   *SECURITY_HEADERS, *response.headers, ("Connection", "close")]
        lines = [f"HTTP/1.0 {response.status} {HTTPStatus(response.status).phrase}"]
        lines += [f"{name}: {value}" for name, value in headers]
        out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return out if head.method == "HEAD" else out + response.body

    def _refusal(self, result: AuthResult, *, api: bool) -> Response:
        assert self.auth is not None
        if result.throttled:
            return _error(429, "too many failed authentications from this address; "
                          "retry later", api=api,
                          headers=[("Retry-After", str(result.retry_after))])
        return _error(401, "authentication required", api=api,
                      headers=[("WWW-Authenticate", self.auth.challenge)])

    # -- WSGI ----------------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse,
                 ) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        response = self._respond(environ, method)
        headers = [("Content-Type", response.content_type),
                   ("Content-Length", str(len(response.body))),
                   *SECURITY_HEADERS, *response.headers]
        phrase = HTTPStatus(response.status).phrase
        start_response(f"{response.status} {phrase}", headers)
        return [] if method == "HEAD" else [response.body]

    def _respond(self, environ: WSGIEnvironment, method: str) -> Response:
        # wsgiref gives PATH_INFO percent-decoded as latin-1; get the UTF-8 text back.
        raw_path = str(environ.get("PATH_INFO", "/")) or "/"
        try:
            path = raw_path.encode("latin-1").decode("utf-8")
        except UnicodeError:
            path = raw_path
        api = path.startswith("/api/")
        if self.auth is not None:
            result = self.auth.authenticate(environ.get("HTTP_AUTHORIZATION"),
                                            str(environ.get("REMOTE_ADDR", "")))
            if result.user is None:
                return self._refusal(result, api=api)
            environ["sigwatch.user"] = result.user
        route, params, allowed = self._match(path, method)
        if route is None:
            if allowed:
                return _error(405, f"method {method} not allowed", api=api,
                              headers=[("Allow", ", ".join(sorted(allowed)))])
            return _error(404, "not found", api=api)
        try:
            query = parse_query(str(environ.get("QUERY_STRING", "")))
            return route.handler(Request(method, path, query, params, environ))
        except BadRequestError as exc:
            return _error(400, exc.message, api=api, parameter=exc.parameter)
        except Exception:
            log.exception("http_handler_failed", path=route.template)
            return _error(500, "internal error (see the daemon's log)", api=api)

    def _match(self, path: str, method: str,
               ) -> tuple[Route | None, dict[str, str], set[str]]:
        allowed: set[str] = set()
        for route in self._routes:
            m = route.pattern.fullmatch(path)
            if m is None:
                continue
            if method in route.methods:
                return route, m.groupdict(), allowed
            allowed |= route.methods
        return None, {}, allowed

    # -- operational routes --------------------------------------------------------------------

    def _metrics(self, request: Request) -> Response:
        names = [v for k, v in request.query if k == "name[]"]
        registry = self.registry.restricted_registry(names) if names else self.registry
        encoder, content_type = choose_encoder(request.header("Accept"))
        body = encoder(registry)
        headers: list[tuple[str, str]] = []
        if "gzip" in request.header("Accept-Encoding"):
            body = gzip.compress(body, compresslevel=6)
            headers.append(("Content-Encoding", "gzip"))
        return Response(200, body, content_type, headers)

    def _healthy(self, _request: Request) -> Response:
        if self.liveness.healthy():
            return text_response(200, "sigwatch is healthy.\n")
        silence = self.liveness.silence()
        why = ("the pump has not started" if silence is None
               else f"the pump has not beaten for {silence:.0f} s")
        return text_response(503, f"sigwatch is unhealthy: {why}.\n")

    def _ready(self, _request: Request) -> Response:
        if self.liveness.ready:
            return text_response(200, "sigwatch is ready.\n")
        return text_response(503, f"sigwatch is not ready: {self.liveness.not_ready_reason}.\n")


def _error(status: int, message: str, *, api: bool, parameter: str = "",
           headers: list[tuple[str, str]] | None = None) -> Response:
    if api:
        err: dict[str, object] = {"status": status, "message": message}
        if parameter:
            err["parameter"] = parameter
        return json_response(status, {"error": err}, headers)
    return error_page(status, message, headers)
