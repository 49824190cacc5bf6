"""The JSON API behind the status page (``/api/v1/...``).

``GET /api/v1/detections`` lists recent detections newest first. Parameters (all optional):

- ``severity``: ``info``, ``warning``, ``error`` or ``critical``; repeat it or separate with
  commas for several;
- ``signature``: a signature id; ``source``: a configured source name;
- ``limit``: 1 to 500 (default 50); a page also ends before ``MAX_RESPONSE_BYTES`` (1 MiB),
  with ``next_cursor`` leading on;
- ``cursor``: the ``next_cursor`` of the previous page (opaque; stable while new detections
  arrive, unlike an offset).

Any other parameter, a repeated single-valued one or a bad value is a 400 whose JSON names the
parameter: ``{"error": {"status": 400, "parameter": "limit", "message": "..."}}``. Each item is
``Detection.to_json()`` unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sigwatch.model import Severity
from sigwatch.web.request import BadRequestError, Request, Response, json_response
from sigwatch.web.status import StatusProvider
from sigwatch.web.store import DetectionStore, StoredDetection

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "MAX_RESPONSE_BYTES",
    "DetectionQuery",
    "mount",
    "parse_detection_query",
]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_RESPONSE_BYTES = 1 << 20
"""A page of detections stops before this many bytes (then ``next_cursor`` leads on): with
``DetectionCaps`` a detection is at most about 26 KiB, and no response holds the ring whole."""
_MAX_TEXT = 200
_ID_CHARS = frozenset("0123456789abcdef")


class Router(Protocol):
    """What ``mount`` needs of the application."""

    def add_route(self, template: str, handler: Any, methods: Iterable[str] = ...,
                  ) -> None: ...


@dataclass(frozen=True, slots=True)
class DetectionQuery:
    """Validated filters and paging, shared by ``/`` and ``/api/v1/detections``."""

    severities: frozenset[Severity] = frozenset()
    signature: str = ""
    source: str = ""
    limit: int = DEFAULT_LIMIT
    cursor: int | None = None

    def params(self, *, cursor: int | None = None) -> list[tuple[str, str]]:
        """Query pairs that reproduce these filters (for links), with another cursor."""
        out = [("severity", s.label) for s in sorted(self.severities)]
        if self.signature:
            out.append(("signature", self.signature))
        if self.source:
            out.append(("source", self.source))
        if self.limit != DEFAULT_LIMIT:
            out.append(("limit", str(self.limit)))
        if cursor is not None:
            out.append(("cursor", str(cursor)))
        return out


_KNOWN = ("severity", "signature", "source", "limit", "cursor")


def parse_detection_query(pairs: Iterable[tuple[str, str]]) -> DetectionQuery:
    """Check every parameter; raise ``BadRequestError`` naming the first one that is wrong."""
    seen: dict[str, str] = {}
    severities: set[Severity] = set()
    for key, value in pairs:
        if key not in _KNOWN:
            msg = f"unknown parameter {key!r} (known: {', '.join(_KNOWN)})"
            raise BadRequestError(msg, key)
        if key == "severity":
            for part in filter(None, (p.strip() for p in value.split(","))):
                try:
                    severities.add(Severity.parse(part))
                except KeyError:
                    names = ", ".join(s.label for s in Severity)
                    msg = f"severity must be one of {names}, not {part[:_MAX_TEXT]!r}"
                    raise BadRequestError(msg, key) from None
            continue
        if key in seen:
            msg = f"{key} given more than once"
            raise BadRequestError(msg, key)
        seen[key] = value
    for key in ("signature", "source"):
        if len(seen.get(key, "")) > _MAX_TEXT:
            msg = f"{key} is longer than {_MAX_TEXT} characters"
            raise BadRequestError(msg, key)
    return DetectionQuery(
        severities=frozenset(severities),
        signature=seen.get("signature", "").strip(),
        source=seen.get("source", "").strip(),
        limit=_int_param(seen, "limit", None, 1, MAX_LIMIT) or DEFAULT_LIMIT,
        cursor=_int_param(seen, "cursor", None, 1, 2**62),
    )


def _int_param(seen: dict[str, str], key: str, default: int | None, low: int, high: int,
               ) -> int | None:
    text = seen.get(key, "").strip()
    if not text:
        return default
    # Digits are counted before int(): Python refuses more than 4,300 of them (ValueError).
    if (not (text.isascii() and text.isdigit()) or len(text) > len(str(high))
            or not low <= int(text) <= high):
        what = "a page size" if key == "limit" else "a next_cursor from a previous page"
        msg = f"{key} must be {what}: an integer from {low} to {high}, not {text[:40]!r}"
        raise BadRequestError(msg, key)
    return int(text)


def valid_event_id(text: str) -> bool:
    """Event ids are 24 lowercase hex digits (``Detection.event_id``)."""
    return len(text) == 24 and set(text) <= _ID_CHARS


def mount(app: Router, store: DetectionStore, status: StatusProvider) -> None:
    """Add the ``/api/v1/...`` routes to ``app``."""
    api = _Api(store, status)
    app.add_route("/api/v1/detections", api.detections)
    app.add_route("/api/v1/detections/{event_id}", api.detection)
    app.add_route("/api/v1/sources", api.sources)
    app.add_route("/api/v1/signatures", api.signatures)


def _ids(items: Iterable[StoredDetection]) -> list[str]:
    return [s.event_id for s in items]


class _Api:
    def __init__(self, store: DetectionStore, status: StatusProvider) -> None:
        self.store = store
        self.status = status

    def detections(self, request: Request) -> Response:
        q = parse_detection_query(request.query)
        page = self.store.query(severities=q.severities, signature=q.signature,
                                source=q.source, before=q.cursor, limit=q.limit)
        items: list[dict[str, Any]] = []
        size = 0
        next_cursor = page.next_cursor
        for n, stored in enumerate(page.items):
            doc = stored.detection.to_json()
            size += len(json.dumps(doc, ensure_ascii=False))
            if items and size > MAX_RESPONSE_BYTES:
                # The page ends here; the cursor leads to the rest (nothing is lost).
                next_cursor = page.items[n - 1].seq
                break
            items.append(doc)
        return json_response(200, {
            "detections": items,
            "total": page.total,
            "limit": q.limit,
            "next_cursor": None if next_cursor is None else str(next_cursor),
        })

    def detection(self, request: Request) -> Response:
        event_id = request.params["event_id"]
        if request.query:
            msg = "this endpoint takes no parameters"
            raise BadRequestError(msg, request.query[0][0])
        item = self.store.get(event_id) if valid_event_id(event_id) else None
        if item is None:
            return json_response(404, {"error": {
                "status": 404, "message": f"no detection {event_id[:40]!r} is held "
                "(unknown, or older than the ring keeps)"}})
        root = self.store.root_cause_of(item)
        return json_response(200, {
            "detection": item.detection.to_json(),
            "earlier": _ids(self.store.earlier(item)),
            "root_cause_id": root.event_id if root else None,
            "fallout": _ids(self.store.fallout_of(item)),
        })

    def sources(self, request: Request) -> Response:
        if request.query:
            msg = "this endpoint takes no parameters"
            raise BadRequestError(msg, request.query[0][0])
        return json_response(200, {"sources": [s.to_json() for s in self.status.sources()]})

    def signatures(self, request: Request) -> Response:
        if request.query:
            msg = "this endpoint takes no parameters"
            raise BadRequestError(msg, request.query[0][0])
        return json_response(200, {"signatures": [
            s.to_json() for s in self.status.signatures()]})
