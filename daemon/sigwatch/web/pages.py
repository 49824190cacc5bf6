"""The status page on-call opens from an alert: ``/`` and ``/detections/<event_id>``.

Server-rendered HTML, no script, readable on a phone (tables turn into cards below 700 px).
``/`` starts with the open incidents (``incidents.py``: repeats counted, fallout folded under
its cause, the most severe first), each with its line and its fix, so the first screen of a
phone shows the worst one; then the node's faults (``faults.py``), every recent detection
newest first (filters: severity, signature, source, folded away until used; paging with the
API's cursor), the earlier incidents and each reader's health. The header names the node
(``--node``). A detection's page shows the triggering line highlighted after its context,
where it was read (file, line, offset, rank), the fix (summary, steps, runbook), its root
cause or its fallout, and earlier detections of the same signature; a detection without a
line shows what it is about and its figures.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable, Sequence

from sigwatch.clock import Clock
from sigwatch.model import Detection, Severity
from sigwatch.web.api import DetectionQuery, Router, parse_detection_query, valid_event_id
from sigwatch.web.incidents import DEFAULT_WINDOW, Incident, build_incidents, detection_field
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
_EARLIER = 30  # closed incidents listed
_HTML = "text/html; charset=utf-8"


def detection_path(event_id: str) -> str:
    """The page of one detection, relative to the listener (alerts prepend the external URL)."""
    return f"/detections/{urllib.parse.quote(event_id, safe='')}"


def detection_url(external_url: str, event_id: str) -> str:
    """The absolute link an alert carries: ``external_url`` (``[web] external_url``) + path."""
    return external_url.rstrip("/") + detection_path(event_id)


def mount(app: Router, store: DetectionStore, status: StatusProvider, *,
          clock: Clock | None = None, node: str = "", window: float | None = None,
          sections: Sequence[Callable[[float], str]] = ()) -> None:
    """Add ``/`` and ``/detections/{event_id}`` to ``app`` (its clock, node and incident
    window by default).

    ``sections`` render more blocks of ``/`` (given the time), placed right after the open
    incidents: the node faults (``sigwatch.web.faults``)."""
    pages = _Pages(store, status, clock or getattr(app, "clock"),  # noqa: B009
                   node or str(getattr(app, "node", "")),
                   window if window is not None else float(getattr(app, "incident_window",
                                                                   DEFAULT_WINDOW)),
                   sections)
    app.add_route("/", pages.index)
    app.add_route("/detections/{event_id}", pages.detection)


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _duration(seconds: float) -> str:
    """``1 hour``, ``30 minutes``, ``45 seconds``: the incident window in words."""
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size and seconds % size == 0:
            return _plural(int(seconds // size), unit)
    return _plural(int(seconds), "second")


def _where(d: Detection) -> str:
    parts = [e(d.path)]
    if d.line is not None:
        parts.append(f"line {d.line}")
    if d.rank is not None:
        parts.append(f"rank {e(d.rank)}")
    return ", ".join(parts)


class _Pages:
    def __init__(self, store: DetectionStore, status: StatusProvider, clock: Clock,
                 node: str, window: float,
                 sections: Sequence[Callable[[float], str]] = ()) -> None:
        self.store = store
        self.status = status
        self.clock = clock
        self.node = node
        self.window = window
        self.sections = list(sections)

    def _page(self, title: str, body: str, status: int = 200) -> Response:
        return Response(status, layout(title, body, node=self.node), _HTML)

    # -- / -------------------------------------------------------------------------------------

    def index(self, request: Request) -> Response:
        q = parse_detection_query(request.query)
        page = self.store.query(severities=q.severities, signature=q.signature,
                                source=q.source, before=q.cursor, limit=q.limit)
        now = self.clock.time()
        incidents = build_incidents(self.store.items(), now=now, window=self.window,
                                    held_open=self.status.open_incidents())
        open_now = [i for i in incidents if i.open]
        body = [self._headline(open_now, now)]
        body.append(self._open_incidents(open_now, now))
        # More blocks (the node faults, sigwatch.web.faults): after the incidents, so a
        # phone's first screen shows the worst incident and its fix.
        body.extend(section(now) for section in self.sections)
        body.append(self._recent(q, page.items, page.next_cursor, page.total, now))
        body.append(self._earlier_incidents([i for i in incidents if not i.open], now))
        body.append(self._sources(self.status.sources(), now))
        return self._page("Incidents", "".join(body))

    # -- incidents first -----------------------------------------------------------------------

    def _headline(self, open_now: Sequence[Incident], now: float) -> str:
        if not open_now:
            last = self.store.query(limit=1).items
            quiet = (f"Last detection {ago(last[0].detection.time, now)}."
                     if last else "Nothing recognised on this node yet.")
            window = _duration(self.window)
            return ('<h1 class="headline headline-ok">No open incident</h1>'
                    f'<p class="muted">Nothing seen in the last {e(window)} is still open. '
                    f"{e(quiet)}</p>")
        by_severity: dict[Severity, int] = {}
        for i in open_now:
            by_severity[i.severity] = by_severity.get(i.severity, 0) + 1
        counts = " · ".join(f"{n} {s.label}" for s, n in sorted(by_severity.items(),
                                                                 reverse=True))
        return (f'<h1 class="headline headline-bad">'
                f'{e(_plural(len(open_now), "open incident"))}</h1>'
                f'<p class="counts">{e(counts)}</p>')

    def _open_incidents(self, open_now: Sequence[Incident], now: float) -> str:
        if not open_now:
            return ""
        cards = "".join(self._incident_card(i, now) for i in open_now)
        return f'<section id="incidents" class="incidents">{cards}</section>'

    def _incident_card(self, inc: Incident, now: float) -> str:
        d = inc.cause
        page = inc.first or inc.latest_stored
        title = e(d.title)
        if page is not None and self.store.get(page.event_id) is not None:
            title = f'<a href="{e(detection_path(page.event_id))}">{title}</a>'
        tags = [f'<span class="mono">{e(d.signature)}</span>', e(d.source)]
        for name, label in (("job", "job"), ("owner", "owner")):
            value = detection_field(d, name)
            if value and value != "unknown":
                tags.append(f'{label} <b class="field-{name}">{e(value)}</b>')
        state = ("still open (a detector holds it)" if inc.held_open
                 else f"last {ago(inc.last_seen, now)}")
        when = (f"since {e(fmt_time(inc.first_seen))} ({e(ago(inc.first_seen, now))}), "
                f"{e(state)}")
        count = _plural(inc.count, "detection")
        if len(inc.ranks) == 1:
            count += f" on rank {e(inc.ranks[0])}"
        elif inc.ranks:
            count += f" on {len(inc.ranks)} ranks"
        evidence = (f'<pre class="log trigger"><mark>{e(_excerpt(d.text))}</mark></pre>'
                    if d.text is not None
                    else f'<p class="about">{e(d.about or "No triggering line.")}</p>')
        out = [
            f'<article class="incident incident-{d.severity.label}">',
            f'<h2 class="incident-title">{severity_badge(inc.severity)} {title}</h2>',
            f'<p class="tags muted">{" · ".join(tags)}</p>',
            f'<p class="when"><b class="count">{count}</b>, {when}</p>',
            evidence,
            self._fix(d),
        ]
        if d.root_cause is not None:
            out.append(f'<p class="muted">Likely fallout of {e(d.root_cause.title)} '
                       f'(<span class="mono">{e(d.root_cause.signature)}</span>), no longer '
                       "held here.</p>")
        out.append(self._fallout(inc))
        out.append("</article>")
        return "".join(out)

    def _fix(self, d: Detection) -> str:
        r = d.remediation
        if not (r.summary or r.steps or r.runbook):
            return '<p class="fix muted">This signature carries no fix.</p>'
        out = ['<div class="fix">']
        out.append(f"<p><b>Fix:</b> {e(r.summary)}</p>" if r.summary else "<p><b>Fix:</b></p>")
        if r.steps:
            out.append('<ol class="steps">' + "".join(f"<li>{e(s)}</li>" for s in r.steps)
                       + "</ol>")
        href = safe_href(r.runbook) if r.runbook else None
        if href:
            out.append(f'<p><a href="{e(href)}" rel="noopener noreferrer">Runbook</a></p>')
        out.append("</div>")
        return "".join(out)

    def _fallout(self, inc: Incident) -> str:
        groups = inc.fallout_groups()
        if not groups:
            return ""
        names = ", ".join(f"{e(g.title)} &#215;{g.count}" for g in groups)
        items = []
        for g in groups:
            name = e(g.title)
            if g.latest is not None:
                name = f'<a href="{e(detection_path(g.latest.event_id))}">{name}</a>'
            items.append(f"<li>{severity_badge(g.severity)} {name} "
                         f'<span class="muted">&#215;{g.count}</span></li>')
        return ('<details class="fallout"><summary>Fallout: '
                f"{e(_plural(inc.fallout_count, 'detection'))} caused by this "
                f'({names})</summary><ul>{"".join(items)}</ul></details>')

    def _earlier_incidents(self, closed: Sequence[Incident], now: float) -> str:
        if not closed:
            return ""
        rows = []
        for inc in closed[:_EARLIER]:
            d = inc.cause
            page = inc.first or inc.latest_stored
            title = e(d.title)
            if page is not None:
                title = f'<a href="{e(detection_path(page.event_id))}">{title}</a>'
            ended = "resolved" if inc.resolved else "quiet"
            fallout = (f"<br><span class=\"muted\">+{_plural(inc.fallout_count, 'fallout')}"
                       "</span>" if inc.fallout else "")
            rows.append(
                f'<tr><td data-label="Last seen">{e(fmt_time(inc.last_seen))}<br>'
                f'<span class="muted">{e(ago(inc.last_seen, now))}, {ended}</span></td>'
                f'<td data-label="Severity">{severity_badge(inc.severity)}</td>'
                f'<td data-label="Incident">{title}<br><span class="muted mono">'
                f"{e(d.signature)}</span></td>"
                f'<td data-label="Source">{e(d.source)}</td>'
                f'<td data-label="Detections" class="num">{inc.count}{fallout}</td></tr>')
        more = (f'<p class="muted">{len(closed) - _EARLIER} older incidents not shown.</p>'
                if len(closed) > _EARLIER else "")
        return ('<section id="earlier"><h2>Earlier incidents</h2>'
                f'<p class="muted">Quiet for more than {e(_duration(self.window))}, or '
                'resolved.</p><table class="cards earlier"><thead><tr><th>Last seen</th>'
                "<th>Severity</th><th>Incident</th><th>Source</th><th>Detections</th></tr>"
                "</thead><tbody>" + "".join(rows) + f"</tbody></table>{more}</section>")

    # -- every detection -----------------------------------------------------------------------

    def _recent(self, q: DetectionQuery, items: Sequence[StoredDetection],
                next_cursor: int | None, total: int, now: float) -> str:
        filtered = bool(q.severities or q.signature or q.source)
        head = "Recent detections" + (" (filtered)" if filtered else "")
        return (f'<section id="detections"><h2>{head}</h2>'
                + self._filters(q)
                + self._detection_table(items, now, empty=(
                    "No detection matches these filters." if filtered
                    else "No detections yet: nothing recognised on this node."))
                + self._pager(q, next_cursor, total, len(items)) + "</section>")

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
        active = bool(q.severities or q.signature or q.source)
        return (
            f'<details class="filters"{" open" if active else ""}><summary>Filter</summary>'
            '<form class="filters" method="get" action="/#detections">'
            f'<label>Severity<select name="severity">{"".join(sev_opts)}</select></label>'
            f'<label>Signature<select name="signature">{"".join(sig_opts)}</select></label>'
            f'<label>Source<select name="source">{"".join(src_opts)}</select></label>'
            '<button type="submit">Filter</button>'
            + ('<a href="/#detections">Clear</a>' if active else "")
            + "</form></details>")

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
                f'{e(d.title)}</a><br><span class="muted mono">{e(d.signature)}</span>'
                + (f'<br><span class="muted">fallout of {e(d.root_cause.title)}</span>'
                   if d.root_cause is not None else "") + "</td>"
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
            links.append(f'<a href="/?{e(urllib.parse.urlencode(q.params()))}#detections">'
                         "Newest</a>")
        if next_cursor is not None:
            query = urllib.parse.urlencode(q.params(cursor=next_cursor))
            links.append(f'<a href="/?{e(query)}#detections">Older detections</a>')
        count = f'<span class="muted">{shown} shown of {total}</span>'
        return f'<div class="pager">{count}{"".join(links)}</div>'

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
        if d.jobs:
            rows.append(("Job" if len(d.jobs) == 1 else "Jobs", e(", ".join(d.jobs))))
        if d.owner != "unknown":
            rows.append(("Owner", e(d.owner)))
        if d.incident:
            rows.append(("Repeat", (f"{d.occurrence:,} of the incident opened by "
                                   f'<a href="{e(detection_path(d.incident))}">'
                                   f'<span class="mono">{e(d.incident)}</span></a>')))
        rows.extend((f"Capture {e(k)}", f'<span class="mono">{e(v)}</span>')
                    for k, v in d.captures)
        rows.extend((f"Label {e(k)}", e(v)) for k, v in d.labels)
        event = (f'<span class="mono">{e(d.event_id)}</span> '
                 f'(<a href="/api/v1/detections/{e(d.event_id)}">JSON</a>)')
        rows.append(("Event id", event))
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
        return f'<h2>Details</h2><dl class="meta">{dl}</dl>'
