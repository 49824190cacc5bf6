"""The HTML status page: what it lists, what a detection page holds, and that it escapes."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from support.web import engine_store, make_detection, status_for

from sigwatch.model import Remediation, RootCause, Severity
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
        """The engine's detections listed newest first, each reader with its health, and the
        open incidents."""
        store = DetectionStore(None)
        found = engine_store(library, store)
        stall = make_detection(0, signature="training_stall", title="Training Stalled",
                               line=None, offset=None, text=None,
                               about="no step logged for 10 min", key="k")
        page = serve(store=store, status=status_for(library, open_incidents=[stall])).get(
            "/").text

        positions = [page.index(f"/detections/{d.event_id}") for d in reversed(found)]
        assert sorted(positions) == positions
        assert "training" in page
        assert "120,345" in page  # lines read by the training source
        assert "Training Stalled" in page
        assert "no step logged for 10 min" in page

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

        assert ["/?source=training&limit=2&cursor=3"] == older

    def test_bad_filter_is_a_400_page(self, serve) -> None:
        """Bad parameters on the HTML page: a 400 page saying what is wrong."""
        reply = serve().get("/?severity=loud")

        assert 400 == reply.status
        assert "severity must be one of" in reply.text

    def test_empty_store_says_so(self, serve) -> None:
        """A quiet node shows a plain sentence, not an empty table."""
        assert "No detections yet" in serve().get("/").text


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
