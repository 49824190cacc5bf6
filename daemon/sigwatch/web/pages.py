"""The status page on-call opens from an alert: ``/`` and ``/detections/<event_id>``.

Server-rendered HTML, no script, readable on a phone (tables turn into cards below 700 px).
``/`` lists recent detections newest first (filters: severity, signature, source; paging with
the API's cursor), the open incidents and each reader's health. A detection's page shows the
triggering line highlighted after its context, where it was read (file, line, offset, rank),
the fix (summary, steps, runbook), its root cause or its fallout, and earlier detections of
the same signature; a detection without a line shows what it is about and its figures.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable, Sequence

from sigwatch.clock import Clock
from sigwatch.model import Detection, Severity
from sigwatch.web.api import DetectionQuery, Router, parse_detection_query, valid_event_id
from sigwatch.web.render import (
    ago,
    e,
    error_page,
    fmt_time,
    layout,
    safe_href,
    severity_badge,
)
from sigwatch.web.request import BadRequestError, Request, Response
from sigwatch.web.status import SourceStatus, StatusProvider
from sigwatch.web.store import DetectionStore, StoredDetection

__all__ = ["detection_path", "detection_url", "mount"]

_EXCERPT = 240
_HTML = "text/html; charset=utf-8"


def detection_path(event_id: str) -> str:
    """The page of one detection, relative to the listener (alerts prepend the external URL)."""
    return f"/detections/{urllib.parse.quote(event_id, safe='')}"


def detection_url(external_url: str, event_id: str) -> str:
    """The absolute link an alert carries: ``external_url`` (``[web] external_url``) + path."""
    return external_url.rstrip("/") + detection_path(event_id)


def mount(app: Router, store: DetectionStore, status: StatusProvider, *,
          clock: Clock | None = None, node: str = "",
          sections: Sequence[Callable[[float], str]] = ()) -> None:
    """Add ``/`` and ``/detections/{event_id}`` to ``app`` (its clock and node by default).

    ``sections`` render more blocks of ``/`` (given the time), placed before the open
    incidents: the node faults (``sigwatch.web.faults``)."""
    pages = _Pages(store, status, clock or getattr(app, "clock"),  # noqa: B009
                   node or str(getattr(app, "node", "")), sections)
    app.add_route("/", pages.index)
    app.add_route("/detections/{event_id}", pages.detection)


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def _where(d: Detection) -> str:
    parts = [e(d.path)]
    if d.line is not None:
        parts.append(f"line {d.line}")
    if d.rank is not None:
        parts.append(f"rank {e(d.rank)}")
    return ", ".join(parts)


class _Pages:
    def __init__(self, store: DetectionStore, status: StatusProvider, clock: Clock,
                 node: str, sections: Sequence[Callable[[float], str]] = ()) -> None:
        self.store = store
        self.status = status
        self.clock = clock
        self.node = node
        self.sections = list(sections)

    def _page(self, title: str, body: str, status: int = 200) -> Response:
        return Response(status, layout(title, body, node=self.node), _HTML)

    # -- / -------------------------------------------------------------------------------------

    def index(self, request: Request) -> Response:
        q = parse_detection_query(request.query)
        page = self.store.query(severities=q.severities, signature=q.signature,
                                source=q.source, before=q.cursor, limit=q.limit)
        now = self.clock.time()
        filtered = bool(q.severities or q.signature or q.source)
        head = "Recent detections" + (" (filtered)" if filtered else "")
        body = [f"<h1>{head}</h1>"]
        body.append(self._filters(q))
        body.append(self._detection_table(page.items, now, empty=(
            "No detection matches these filters." if filtered
            else "No detections yet: nothing recognised on this node.")))
        body.append(self._pager(q, page.next_cursor, page.total, len(page.items)))
        body.extend(section(now) for section in self.sections)
        body.append(self._open_incidents(now))
        body.append(self._sources(self.status.sources(), now))
        return self._page("Detections", "".join(body))

    def _filters(self, q: DetectionQuery) -> str:
        sev = next(iter(q.severities)) if len(q.severities) == 1 else None
        sev_opts = ['<option value="">any</option>'] + [
            f'<option value="{s.label}"{" selected" if s is sev else ""}>{s.label}</option>'
            for s in sorted(Severity, reverse=True)]
        sigs = sorted({s.id for s in self.status.signatures()} | (
            {q.signature} if q.signature else set()))
        sig_opts = ['<option value="">any</option>'] + [
            f'<option value="{e(s)}"{" selected" if s == q.signature else ""}>{e(s)}</option>'
            for s in sigs]
        srcs = [s.name for s in self.status.sources()]
        if q.source and q.source not in srcs:
            srcs.append(q.source)
        src_opts = ['<option value="">any</option>'] + [
            f'<option value="{e(s)}"{" selected" if s == q.source else ""}>{e(s)}</option>'
            for s in srcs]
        return (
            '<form class="filters" method="get" action="/">'
            f'<label>Severity<select name="severity">{"".join(sev_opts)}</select></label>'
            f'<label>Signature<select name="signature">{"".join(sig_opts)}</select></label>'
            f'<label>Source<select name="source">{"".join(src_opts)}</select></label>'
            '<button type="submit">Filter</button>'
            + ('<a href="/">Clear</a>' if q.severities or q.signature or q.source else "")
            + "</form>")

    def _detection_table(self, items: Sequence[StoredDetection], now: float, *,
                         empty: str) -> str:
        if not items:
            return f'<p class="muted">{e(empty)}</p>'
        rows = []
        for s in items:
            d = s.detection
            what = d.text if d.text is not None else d.about
            rows.append(
                "<tr>"
                f'<td data-label="When"><a href="{e(detection_path(s.event_id))}">'
                f"{e(fmt_time(d.time))}</a><br><span class=\"muted\">{e(ago(d.time, now))}"
                "</span></td>"
                f'<td data-label="Severity">{severity_badge(d.severity)}</td>'
                f'<td data-label="Signature"><a href="{e(detection_path(s.event_id))}">'
                f'{e(d.title)}</a><br><span class="muted mono">{e(d.signature)}</span></td>'
                f'<td data-label="Source">{e(d.source)}<br><span class="muted mono">'
                f"{_where(d)}</span></td>"
                f'<td data-label="Line"><span class="mono excerpt">{e(_excerpt(what or ""))}'
                "</span></td></tr>")
        return ('<table class="cards detections"><thead><tr><th>When</th><th>Severity</th>'
                "<th>Signature</th><th>Source</th><th>Line</th></tr></thead><tbody>"
                + "".join(rows) + "</tbody></table>")

    def _pager(self, q: DetectionQuery, next_cursor: int | None, total: int, shown: int) -> str:
        links = []
        if q.cursor is not None:
            links.append(f'<a href="/?{e(urllib.parse.urlencode(q.params()))}">Newest</a>')
        if next_cursor is not None:
            query = urllib.parse.urlencode(q.params(cursor=next_cursor))
            links.append(f'<a href="/?{e(query)}">Older detections</a>')
        count = f'<span class="muted">{shown} shown of {total}</span>'
        return f'<div class="pager">{count}{"".join(links)}</div>'

    def _open_incidents(self, now: float) -> str:
        incidents = self.status.open_incidents()
        if not incidents:
            return ('<h2 id="incidents">Open incidents</h2>'
                    '<p class="muted">None: no stall or regression is open.</p>')
        rows = []
        for d in incidents:
            title = e(d.title)
            if self.store.get(d.event_id) is not None:
                title = f'<a href="{e(detection_path(d.event_id))}">{title}</a>'
            rows.append(
                f'<tr><td data-label="Since">{e(fmt_time(d.time))}<br><span class="muted">'
                f"{e(ago(d.time, now))}</span></td>"
                f'<td data-label="Severity">{severity_badge(d.severity)}</td>'
                f'<td data-label="Incident">{title}<br><span class="muted">'
                f"{e(d.about or (d.text or ''))}</span></td>"
                f'<td data-label="Source">{e(d.source)}</td></tr>')
        return ('<h2 id="incidents">Open incidents</h2><table class="cards"><thead><tr>'
                "<th>Since</th><th>Severity</th><th>Incident</th><th>Source</th></tr></thead>"
                "<tbody>" + "".join(rows) + "</tbody></table>")

    def _sources(self, sources: Iterable[SourceStatus], now: float) -> str:
        rows = []
        for s in sources:
            lag = "unknown" if s.lag is None else (
                f"{s.lag:,.0f} {s.lag_unit}" if s.lag_unit != "none" else "")
            last = ("never" if s.last_read is None
                    else f"{fmt_time(s.last_read)} ({ago(s.last_read, now)})")
            errors = (f'<span class="state state-bad">{s.errors}</span>' if s.errors
                      else "0")
            rows.append(
                f'<tr><td data-label="Source"><b>{e(s.name)}</b></td>'
                f'<td data-label="Kind">{e(s.kind)}</td>'
                f'<td data-label="Streams" class="num">{s.streams}</td>'
                f'<td data-label="Lines" class="num">{s.lines:,}</td>'
                f'<td data-label="Bytes" class="num">{s.bytes:,}</td>'
                f'<td data-label="Lag" class="num">{e(lag)}</td>'
                f'<td data-label="Last read">{e(last)}</td>'
                f'<td data-label="Errors" class="num">{errors}</td></tr>')
        if not rows:
            return '<h2 id="sources">Readers</h2><p class="muted">No sources configured.</p>'
        return ('<h2 id="sources">Readers</h2><table class="cards"><thead><tr><th>Source</th>'
                "<th>Kind</th><th>Streams</th><th>Lines</th><th>Bytes</th><th>Lag</th>"
                "<th>Last read</th><th>Errors</th></tr></thead><tbody>"
                + "".join(rows) + "</tbody></table>")

    # -- /detections/<id> ----------------------------------------------------------------------

    def detection(self, request: Request) -> Response:
        event_id = request.params["event_id"]
        if request.query:
            msg = "this page takes no parameters"
            raise BadRequestError(msg, request.query[0][0])
        item = self.store.get(event_id) if valid_event_id(event_id) else None
        if item is None:
            return error_page(404, f"No detection {event_id[:40]!r} is held here: unknown, "
                              "or older than the status page keeps.")
        d = item.detection
        now = self.clock.time()
        body = [
            f"<h1>{severity_badge(d.severity)} {e(d.title)}</h1>",
            f'<p class="muted">{e(fmt_time(d.time))} ({e(ago(d.time, now))})'
            + (f" on {e(d.host)}" if d.host else "") + "</p>",
        ]
        body.append(self._evidence(d))
        body.append(self._remediation(d))
        body.append(self._cause(item))
        body.append(self._meta(item))
        earlier = self.store.earlier(item)
        body.append(f"<h2>Earlier detections of {e(d.signature)}</h2>")
        body.append(self._detection_table(
            earlier, now, empty="None held: this is the first on this node."))
        return self._page(d.title, "".join(body))

    def _evidence(self, d: Detection) -> str:
        if not d.has_line:
            facts = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in d.facts)
            return ("<h2>What happened</h2>"
                    f'<p>{e(d.about or "No triggering line: a detector fired on its own.")}</p>'
                    + (f'<dl class="meta">{facts}</dl>' if facts else ""))
        lines = [f'<span class="ctx">{e(c)}</span>' for c in d.context]
        lines.append(f"<mark>{e(d.text or '')}</mark>")
        note = (f"{len(d.context)} line{'s' if len(d.context) != 1 else ''} of context "
                "before the triggering line (highlighted)" if d.context
                else "The triggering line (no context was captured for this signature)")
        return (f"<h2>Log</h2><p class=\"muted\">{note}, from <span class=\"mono\">"
                f"{_where(d)}</span>, byte offset {d.offset}.</p>"
                f'<pre class="log">{"".join(lines)}</pre>')

    def _remediation(self, d: Detection) -> str:
        r = d.remediation
        out = ["<h2>What to do</h2>"]
        if r.summary:
            out.append(f"<p>{e(r.summary)}</p>")
        if r.steps:
            out.append('<ol class="steps">' + "".join(f"<li>{e(s)}</li>" for s in r.steps)
                       + "</ol>")
        if r.runbook:
            href = safe_href(r.runbook)
            link = (f'<a href="{e(href)}" rel="noopener noreferrer">{e(r.runbook)}</a>'
                    if href else f'<span class="mono">{e(r.runbook)}</span>')
            out.append(f"<p>Runbook: {link}</p>")
        if r.action:
            out.append(f'<p class="muted">Action: {e(r.action)}</p>')
        if len(out) == 1:
            out.append('<p class="muted">This signature carries no remediation.</p>')
        return "".join(out)

    def _cause(self, item: StoredDetection) -> str:
        d = item.detection
        out = []
        rc = d.root_cause
        if rc is not None:
            root = self.store.root_cause_of(item)
            name = e(rc.title)
            if root is not None:
                name = f'<a href="{e(detection_path(root.event_id))}">{name}</a>'
            out.append(
                "<h2>Root cause</h2><div class=\"box\"><p>This is likely fallout of "
                f'{name} (<span class="mono">{e(rc.signature)}</span>), read earlier from '
                f'<span class="mono">{e(rc.path)}</span>:</p>'
                f'<pre class="log"><mark>{e(rc.text)}</mark></pre></div>')
        fallout = self.store.fallout_of(item)
        if fallout:
            links = "".join(
                f'<li><a href="{e(detection_path(s.event_id))}">{e(s.detection.title)}</a> '
                f'<span class="muted">{e(fmt_time(s.detection.time))}</span></li>'
                for s in fallout)
            out.append(f"<h2>Fallout</h2><p>Detections caused by this one:</p><ul>{links}</ul>")
        return "".join(out)

    def _meta(self, item: StoredDetection) -> str:
        d = item.detection
        rows: list[tuple[str, str]] = [
            ("Signature", f'<span class="mono">{e(d.signature)}</span> ({e(d.status)})'),
            ("Source", e(d.source)),
            ("File", f'<span class="mono">{e(d.path)}</span>'),
        ]
        if d.line is not None:
            rows.append(("Line", str(d.line)))
        if d.offset is not None:
            rows.append(("Byte offset", str(d.offset)))
        if d.rank is not None:
            rows.append(("Rank", e(d.rank)))
        rows.extend((f"Capture {e(k)}", f'<span class="mono">{e(v)}</span>')
                    for k, v in d.captures)
        rows.extend((f"Label {e(k)}", e(v)) for k, v in d.labels)
        event = (f'<span class="mono">{e(d.event_id)}</span> '
                 f'(<a href="/api/v1/detections/{e(d.event_id)}">JSON</a>)')
        rows.append(("Event id", event))
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
        return f'<h2>Details</h2><dl class="meta">{dl}</dl>'
