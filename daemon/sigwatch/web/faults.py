"""Node faults on the web: the JSON API and a section of the status page.

- ``GET /api/v1/faults``: ``{"mode": "act", "faults": [...]}``, newest first (open and
  recently cleared); each item is ``Fault.to_json()``.
- ``GET /api/v1/faults/{fault_id}``: one fault.
- ``POST /api/v1/faults/{fault_id}/clear`` with a JSON body ``{"by": "...", "note": "..."}``
  (both optional) clears a fault by hand, which resumes the node when sigwatch drained it and
  nothing else keeps it drained. It needs ``Content-Type: application/json`` (a page of another
  site cannot send that without the browser asking first) and, when ``[web]`` has basic auth,
  credentials like every other path; ``by`` defaults to the authenticated user. 200 with the
  outcome, 404 for an unknown fault, 409 for one already cleared.

``faults_section`` renders the open faults (and the last few cleared) as a block of HTML any
page can place; the status page puts it right after its open incidents.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from sigwatch.faults.model import Fault
from sigwatch.web.render import ago, e, fmt_time
from sigwatch.web.request import BadRequestError, Request, Response, json_response

__all__ = ["FaultsProvider", "faults_section", "mount", "section_renderer"]

_MAX_BODY = 4096
_CLEARED_SHOWN = 5


class ClearOutcome(Protocol):
    """What ``FaultsProvider.clear`` returns."""

    @property
    def ok(self) -> bool: ...
    @property
    def message(self) -> str: ...
    @property
    def fault(self) -> Fault | None: ...


class FaultsProvider(Protocol):
    """The fault engine as the web sees it (thread-safe)."""

    @property
    def mode(self) -> str: ...

    def faults(self) -> Sequence[Fault]: ...

    def clear(self, fault_id: str, *, by: str, note: str = "") -> ClearOutcome: ...


class Router(Protocol):
    def add_route(self, template: str, handler: Any, methods: Iterable[str] = ...,
                  ) -> None: ...


def mount(app: Router, provider: FaultsProvider) -> None:
    """Add the ``/api/v1/faults`` routes to ``app``."""
    api = _Api(provider)
    app.add_route("/api/v1/faults", api.list)
    app.add_route("/api/v1/faults/{fault_id}", api.one)
    app.add_route("/api/v1/faults/{fault_id}/clear", api.clear, methods=("POST",))


class _Api:
    def __init__(self, provider: FaultsProvider) -> None:
        self.provider = provider

    def list(self, request: Request) -> Response:
        if request.query:
            raise BadRequestError("this endpoint takes no parameters", request.query[0][0])
        return json_response(200, {"mode": self.provider.mode,
                                   "faults": [f.to_json() for f in self.provider.faults()]})

    def _find(self, fault_id: str) -> Fault | None:
        return next((f for f in self.provider.faults() if f.id == fault_id), None)

    def one(self, request: Request) -> Response:
        fault = self._find(request.params["fault_id"])
        if fault is None:
            return _not_found(request.params["fault_id"])
        return json_response(200, {"fault": fault.to_json()})

    def clear(self, request: Request) -> Response:
        fault_id = request.params["fault_id"]
        kind = request.header("Content-Type") or str(request.environ.get("CONTENT_TYPE", ""))
        if kind.split(";")[0].strip().lower() != "application/json":
            msg = "send the clear as Content-Type: application/json (a JSON object, may be {})"
            raise BadRequestError(msg, "Content-Type")
        body = _read_body(request)
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            raise BadRequestError("the body is not JSON", "body") from None
        if not isinstance(doc, dict) or set(doc) - {"by", "note"}:
            raise BadRequestError('the body is an object with "by" and "note" only', "body")
        user = str(request.environ.get("sigwatch.user") or "")
        by = str(doc.get("by") or user or "http")
        if user and by != user:
            by = f"{by} (as {user})"
        if self._find(fault_id) is None:
            return _not_found(fault_id)
        result = self.provider.clear(fault_id, by=by[:100], note=str(doc.get("note") or ""))
        status = 200 if result.ok else 409
        return json_response(status, {"cleared": result.ok, "message": result.message,
                                      "fault": result.fault.to_json() if result.fault else None})


def _read_body(request: Request) -> bytes:
    try:
        length = int(str(request.environ.get("CONTENT_LENGTH") or "0"))
    except ValueError:
        raise BadRequestError("bad Content-Length", "Content-Length") from None
    if length > _MAX_BODY:
        raise BadRequestError(f"the body is over {_MAX_BODY} bytes", "body")
    stream = request.environ.get("wsgi.input")
    return stream.read(length) if stream is not None and length > 0 else b""


def _not_found(fault_id: str) -> Response:
    return json_response(404, {"error": {"status": 404,
                                         "message": f"no fault {fault_id[:40]!r} on this node"}})


_STATE_TEXT = {"firing": "firing", "recovering": "recovering (rebooted; clean window running)",
               "escalated": "escalated (came back after reboots)", "cleared": "cleared"}


def faults_section(provider: FaultsProvider, now: float) -> str:
    """The node's faults as an HTML section (open ones, then the last few cleared)."""
    faults = list(provider.faults())
    open_ = [f for f in faults if f.open]
    cleared = [f for f in faults if not f.open][:_CLEARED_SHOWN]
    mode = provider.mode
    head = ('<h2 id="faults">Node faults</h2><p class="muted">Policy mode: '
            f'<b>{e(mode)}</b>{" (nothing is drained; what would be done is said)" if mode == "observe" else ""}.'  # noqa: E501
            " Clear one by hand: <code>sigwatch faults clear ID --config FILE</code>.</p>")
    if not open_ and not cleared:
        return head + '<p class="muted">None: no fault on this node.</p>'
    rows = []
    for f in [*open_, *cleared]:
        state_class = "state-bad" if f.open else "state-ok"
        outcome = f.outcome.replace("_", " ") if f.outcome else "-"
        when = (f"{e(fmt_time(f.opened_at))}<br><span class=\"muted\">"
                f"{e(ago(f.opened_at, now))}</span>")
        cleared_text = ""
        if f.cleared_at is not None:
            cleared_text = (f"<br><span class=\"muted\">{e(f.cleared_by)} "
                            f"{e(ago(f.cleared_at, now))}</span>")
        rows.append(
            "<tr>"
            f'<td data-label="Fault"><span class="mono">{e(f.id)}</span></td>'
            f'<td data-label="State"><span class="state {state_class}">'
            f"{e(_STATE_TEXT.get(f.state, f.state))}</span>{cleared_text}</td>"
            f'<td data-label="Signature">{e(f.title)}<br><span class="muted mono">'
            f"{e(f.signature)}</span></td>"
            f'<td data-label="Opened">{when}</td>'
            f'<td data-label="Action">{e(outcome)}<br><span class="muted">'
            f"{e(f.outcome_detail)}</span></td></tr>")
    return (head + '<table class="cards faults"><thead><tr><th>Fault</th><th>State</th>'
            "<th>Signature</th><th>Opened</th><th>Action</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def section_renderer(provider: FaultsProvider) -> Callable[[float], str]:
    """``faults_section`` bound to a provider: what the status page calls with the time."""
    return lambda now: faults_section(provider, now)
