"""The small request/response vocabulary the routes share, and the query-string rules.

Handlers take a ``Request`` and return a ``Response``; ``BadRequestError`` raised anywhere in a
handler becomes a 400 that says which parameter is wrong (JSON under ``/api/``, a page
elsewhere), never a 500.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any
from wsgiref.types import WSGIEnvironment

__all__ = [
    "MAX_QUERY_FIELDS",
    "BadRequestError",
    "Request",
    "Response",
    "json_response",
    "parse_query",
    "text_response",
]

MAX_QUERY_FIELDS = 50


class BadRequestError(Exception):
    """A request the client must fix: ``parameter`` names the culprit (may be empty)."""

    def __init__(self, message: str, parameter: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.parameter = parameter


@dataclass(frozen=True, slots=True)
class Request:
    """What a handler sees: method, decoded path, query pairs and path parameters."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    params: dict[str, str]
    environ: WSGIEnvironment

    def header(self, name: str) -> str:
        """A request header by its HTTP name (``Accept-Encoding``), empty when absent."""
        return str(self.environ.get("HTTP_" + name.upper().replace("-", "_"), ""))


@dataclass(slots=True)
class Response:
    """Status, body and headers; the application adds the security headers to every one."""

    status: int
    body: bytes
    content_type: str
    headers: list[tuple[str, str]] = field(default_factory=list)


def text_response(status: int, text: str, headers: list[tuple[str, str]] | None = None,
                  ) -> Response:
    return Response(status, text.encode("utf-8"), "text/plain; charset=utf-8", headers or [])


def json_response(status: int, doc: Any, headers: list[tuple[str, str]] | None = None,
                  ) -> Response:
    # A file name that is not UTF-8 holds surrogates: written as JSON escapes, exactly as the
    # event log writes them (json.loads gives the name back; os.fsencode its bytes).
    body = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "backslashreplace")
    return Response(status, body, "application/json; charset=utf-8", headers or [])


def parse_query(text: str) -> tuple[tuple[str, str], ...]:
    """Split a query string strictly: bad percent-encoding or UTF-8 is a ``BadRequestError``."""
    if not text:
        return ()
    try:
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True, encoding="utf-8",
                                       errors="strict", max_num_fields=MAX_QUERY_FIELDS)
    except UnicodeDecodeError:
        msg = "the query string is not valid UTF-8"
        raise BadRequestError(msg) from None
    except ValueError:
        msg = f"too many query parameters (at most {MAX_QUERY_FIELDS})"
        raise BadRequestError(msg) from None
    return tuple(pairs)
