"""The HTML status page: what it lists, what a detection page holds, and that it escapes."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser

import pytest
from support.web import NOW, engine_store, make_detection, status_for

from sigwatch.model import Remediation, RootCause, Severity
from sigwatch.web.status import StaticStatus
from sigwatch.web.store import DetectionStore


class _Tags(HTMLParser):
    """Collects tag names, attributes and text, as a browser's parser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(body: str) -> _Tags:
    p = _Tags()
    p.feed(body)
    return p


HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&'


class TestEscaping:
    def test_html_in_a_log_line_is_text_everywhere(self, serve) -> None:
        """A line, context, path, capture and title holding markup: no tag gets through, and
        the characters are shown as they were written."""
        d = make_detection(0, text=HOSTILE, context=(HOSTILE,), path=f"/logs/{HOSTILE}",
                           captures=(("msg", HOSTILE),), rank=HOSTILE, host=HOSTILE)
        store = DetectionStore(None)
        store.add(d)
        s = serve(store=store)

        for path in ("/", f"/detections/{d.event_id}"):
            page = _parse(s.get(path).text)

            assert "script" not in [t for t, _ in page.tags]
            assert not [a for _, attrs in page.tags for a in attrs if a.startswith("on")]
            assert HOSTILE in "".join(page.text)

    def test_a_javascript_runbook_is_not_a_link(self, serve) -> None:
        """Only http(s) runbooks become links."""
        d = make_detection(0, remediation=Remediation(runbook="javascript:alert(1)"))
        store = DetectionStore(None)
        store.add(d)

        page = _parse(serve(store=store).get(f"/detections/{d.event_id}").text)

        assert not [a for t, a in page.tags if t == "a" and "javascript" in (a["href"] or "")]

    def test_no_script_and_a_csp_that_forbids_it(self, serve) -> None:
        """The page has no script of its own, and the policy allows none."""
        reply = serve().get("/")

        assert "<script" not in reply.text.lower()
        assert "default-src 'none'" in reply.headers["content-security-policy"]
        assert "script-src" not in reply.headers["content-security-policy"]

    def test_a_hostile_id_in_the_path_is_escaped_on_the_404(self, serve) -> None:
        """Even the not-found page escapes what the client sent."""
        reply = serve().get("/detections/%3Cscript%3Ealert(1)%3C%2Fscript%3E")

        assert 404 == reply.status
        assert "<script>" not in reply.text


class TestIndex:
    def test_detections_newest_first_with_readers_and_incidents(self, serve, library) -> None:
        """Below the incidents, the engine's detections newest first, each reader with its
        health; a stall a detector holds open is an open incident."""
        store = DetectionStore(None)
        found = engine_store(library, store)
        stall = make_detection(0, signature="training_stall", title="Training Stalled",
                               line=None, offset=None, text=None,
                               about="no step logged for 10 min", key="k")
        page = serve(store=store, status=status_for(library, open_incidents=[stall])).get(
            "/").text
        listing = page[page.index('<section id="detections">'):]

        positions = [listing.index(f"/detections/{d.event_id}") for d in reversed(found)]
        assert sorted(positions) == positions
        assert "training" in page
        assert "120,345" in page  # lines read by the training source
        incidents = page[page.index('<section id="incidents"'):page.index(
            '<section id="detections">')]
        assert "Training Stalled" in incidents
        assert "no step logged for 10 min" in incidents

    def test_filter_by_severity_shows_only_that_severity(self, serve) -> None:
        """?severity=critical lists only critical detections, and the form keeps the choice."""
        store = DetectionStore(None)
        store.add(make_detection(0, severity=Severity.CRITICAL, title="Crit One"))
        store.add(make_detection(1, severity=Severity.WARNING, title="Warn One"))

        page = serve(store=store).get("/?severity=critical").text

        assert "Crit One" in page
        assert "Warn One" not in page
        assert '<option value="critical" selected>' in page

    def test_older_link_pages_with_the_cursor(self, serve) -> None:
        """More than a page: an 'Older detections' link that carries the filters."""
        store = DetectionStore(None)
        for n in range(4):
            store.add(make_detection(n))

        page = _parse(serve(store=store).get("/?limit=2&source=training").text)
        older = [a["href"] for t, a in page.tags if t == "a" and a.get("href", "").startswith(
            "/?") and "cursor" in (a["href"] or "")]

        assert ["/?source=training&limit=2&cursor=3#detections"] == older

    def test_bad_filter_is_a_400_page(self, serve) -> None:
        """Bad parameters on the HTML page: a 400 page saying what is wrong."""
        reply = serve().get("/?severity=loud")

        assert 400 == reply.status
        assert "severity must be one of" in reply.text

    def test_empty_store_says_so(self, serve) -> None:
        """A quiet node shows a plain sentence, not an empty table."""
        assert "No detections yet" in serve().get("/").text


class TestIncidentsFirst:
    """What on-call reads first at 3 a.m.: the open incidents, the worst on top, with the fix."""

    def _page(self, serve, *detections, now: float = NOW + 120, **status) -> str:  # noqa: ANN001, ANN002, ANN003
        store = DetectionStore(None)
        for d in detections:
            store.add(d)
        s = serve(store=store, status=StaticStatus(**status))
        s.clock.advance(now - NOW)
        return s.get("/").text

    def test_a_critical_cause_is_above_its_newer_info_fallout_which_is_folded_in(
            self, serve) -> None:
        """GPU fallen off the bus, then driver clean-ups naming it: one open critical incident
        at the top, its fallout counted inside it, not listed as incidents of their own."""
        xid79 = make_detection(0, signature="nvidia_xid_79_fallen_off_bus",
                               title="GPU Has Fallen Off The Bus", severity=Severity.CRITICAL,
                               remediation=Remediation(summary="Drain the node.",
                                                       steps=("Drain it.", "Reseat the GPU.")))
        cause = RootCause(xid79.signature, xid79.title, xid79.text or "", xid79.path,
                          xid79.offset or 0)
        fallout = [make_detection(n, signature="nvidia_xid_45_preemptive_cleanup",
                                  title="Channel Cleanup", severity=Severity.INFO,
                                  root_cause=cause) for n in (1, 2, 3)]
        other = make_detection(4, signature="some_warning", title="Some Warning",
                               severity=Severity.WARNING)

        page = self._page(serve, xid79, *fallout, other)
        cards = _parse(page[page.index('<section id="incidents"'):page.index("</section>")])
        text = " ".join(" ".join(cards.text).split())

        assert '<h1 class="headline headline-bad">2 open incidents</h1>' in page
        assert "1 critical · 1 warning" in page
        assert text.index("GPU Has Fallen Off The Bus") < text.index("Some Warning")
        assert "Fix: Drain the node." in text
        assert "Reseat the GPU." in text
        assert "1 detection on rank 0 ," in text
        assert "Fallout: 3 detections caused by this (Channel Cleanup ×3)" in text
        assert 2 == page.count('<article class="incident ')
        assert "field-owner" not in page  # owner "unknown" says nothing: not shown

    def test_no_open_incident_says_so_and_when_the_last_detection_was(self, serve) -> None:
        """Quiet for longer than the window: a plain sentence, and the incident among the
        earlier ones."""
        page = self._page(serve, make_detection(0), now=NOW + 2 * 3600)

        assert '<h1 class="headline headline-ok">No open incident</h1>' in page
        assert "Last detection 2 h ago." in page
        assert '<section id="earlier">' in page
        assert "CUDA Out Of Memory" in page[page.index('<section id="earlier">'):]

    def test_owner_and_job_are_shown_when_a_detection_carries_them(self, serve) -> None:
        """Issue 21: a detection's job and owner are shown (and not required)."""
        base = make_detection(0)
        d = dataclasses.replace(base, owner="node", jobs=("4471203",))

        page = self._page(serve, d)

        assert 'job <b class="field-job">4471203</b>' in page
        assert 'owner <b class="field-owner">node</b>' in page

    def test_a_folded_incident_shows_its_count_once(self, serve) -> None:
        """800,000 Xid lines folded into one incident: one card, its count, its job."""
        first = dataclasses.replace(make_detection(0), owner="node", jobs=("4471203",))
        update = dataclasses.replace(first, offset=9_000_000, incident=first.event_id,
                                     occurrence=800_000, repeats=799_999)

        page = self._page(serve, first, update)

        assert 1 == page.count('<article class="incident')
        assert "800,000 detections" in page
        assert 'job <b class="field-job">4471203</b>' in page

    def test_the_node_faults_follow_the_open_incidents(self, tmp_path) -> None:  # noqa: ANN001
        """The node's faults (sigwatch.web.faults) have their place: after the incident cards
        (the phone's first screen stays the worst incident), before every detection."""
        from prometheus_client import CollectorRegistry  # noqa: PLC0415
        from support.web import request  # noqa: PLC0415

        from sigwatch.clock import FakeClock  # noqa: PLC0415
        from sigwatch.faults.engine import FaultEngine  # noqa: PLC0415
        from sigwatch.faults.policy import Policy  # noqa: PLC0415
        from sigwatch.faults.settings import PolicySettings  # noqa: PLC0415
        from sigwatch.web.app import WebApp  # noqa: PLC0415
        from sigwatch.web.server import WebServer  # noqa: PLC0415
        from sigwatch.web.status import Liveness  # noqa: PLC0415

        clock = FakeClock(NOW + 60)
        xid = make_detection(0, signature="nvidia_xid_79_fallen_off_bus",
                             title="GPU Has Fallen Off The Bus", severity=Severity.CRITICAL,
                             owner="node", line_time=NOW)
        engine = FaultEngine(Policy(PolicySettings(mode="observe")), clock=clock)
        engine.emit(xid)
        store = DetectionStore(None)
        store.add(xid)
        app = WebApp(registry=CollectorRegistry(), liveness=Liveness(clock),
                     status=StaticStatus(), store=store, clock=clock, node="node7",
                     faults=engine)
        server = WebServer(app, "127.0.0.1:0")
        server.start()
        try:
            page = request(server.url("").rstrip("/"), "/").text
        finally:
            server.stop(timeout=5)

        cards = page.index('<section id="incidents"')
        faults = page.index('<h2 id="faults">Node faults</h2>')
        assert cards < faults < page.index('<section id="detections">')
        assert engine.faults()[0].id in page

    def test_the_filter_form_is_folded_until_a_filter_is_used(self, serve) -> None:
        """On a phone the form must not push the incident off the first screen."""
        store = DetectionStore(None)
        store.add(make_detection(0))
        s = serve(store=store)

        assert '<details class="filters"><summary>' in s.get("/").text
        assert '<details class="filters" open>' in s.get("/?severity=error").text

    def test_the_header_names_the_node(self, serve) -> None:
        """The node name given to the app (--node) is in the header and the title."""
        page = serve(node="gpu-node-17").get("/").text

        assert '<span class="node">gpu-node-17</span>' in page
        assert "· sigwatch on gpu-node-17</title>" in page


class TestDetectionPage:
    def test_trigger_highlighted_after_its_context_with_the_fix(self, serve, library) -> None:
        """The triggering line is the <mark> after its context lines; file, line, offset,
        rank, steps and runbook are shown."""
        store = DetectionStore(None)
        found = engine_store(library, store)
        d = next(x for x in found if x.signature == "cuda_device_side_assert"
                 and "RuntimeError" in (x.text or ""))
        reply = serve(store=store).get(f"/detections/{d.event_id}")
        page = reply.text

        assert 200 == reply.status
        assert "<mark>RuntimeError: CUDA error: device-side assert triggered" in page
        assert page.index("Assertion `t &gt;= 0") < page.index("<mark>")
        assert d.path in page
        assert f"byte offset {d.offset}" in page
        assert all(f"<li>{step}</li>" in page.replace("&#x27;", "'").replace("&quot;", '"')
                   for step in d.remediation.steps[:1])
        assert "Earlier detections of cuda_device_side_assert" in page

    def test_job_owner_and_the_incident_a_repeat_belongs_to_are_shown(self, serve) -> None:
        first = dataclasses.replace(make_detection(0), owner="node", jobs=("4471203",))
        repeat = dataclasses.replace(first, offset=9000, incident=first.event_id,
                                     occurrence=42)
        store = DetectionStore(None)
        store.add(first)
        store.add(repeat)

        page = serve(store=store).get(f"/detections/{repeat.event_id}").text

        assert "<dt>Job</dt><dd>4471203</dd>" in page
        assert "<dt>Owner</dt><dd>node</dd>" in page
        assert f'42 of the incident opened by <a href="/detections/{first.event_id}">' in page

    def test_a_line_less_detection_shows_what_it_is_about(self, serve) -> None:
        """A stall has no line: its about text and measured facts are shown instead."""
        stall = make_detection(0, line=None, offset=None, text=None, context=(),
                               about="no step logged for 10 min", key="k",
                               facts=(("last_step", "4100"), ("silent_for", "612 s")))
        store = DetectionStore(None)
        store.add(stall)

        page = serve(store=store).get(f"/detections/{stall.event_id}").text

        assert "no step logged for 10 min" in page
        assert "<dt>last_step</dt><dd>4100</dd>" in page
        assert "<mark>" not in page

    def test_root_cause_and_fallout_link_to_each_other(self, serve) -> None:
        """Fallout names its root (with a link while it is held); the root lists its fallout."""
        store = DetectionStore(None)
        root = make_detection(0, signature="xid_79", title="GPU Fell Off The Bus")
        fallout = make_detection(1, title="NCCL Timeout", root_cause=RootCause(
            "xid_79", root.title, root.text or "", root.path, root.offset or 0))
        store.add(root)
        store.add(fallout)
        s = serve(store=store)

        fallout_page = s.get(f"/detections/{fallout.event_id}").text
        root_page = s.get(f"/detections/{root.event_id}").text

        assert f'<a href="/detections/{root.event_id}">GPU Fell Off The Bus</a>' in fallout_page
        assert f'<a href="/detections/{fallout.event_id}">NCCL Timeout</a>' in root_page

    @pytest.mark.parametrize("path", ["/detections/" + "0" * 24, "/detections/x"])
    def test_unknown_detection_is_404(self, serve, path: str) -> None:
        """Older than the ring or never seen: 404 with a sentence."""
        assert 404 == serve().get(path).status
