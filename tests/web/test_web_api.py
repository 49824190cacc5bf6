"""The JSON API: filters, cursor paging, one detection, sources, signatures, and 400s."""

from __future__ import annotations

import json

import pytest
from support.web import engine_store, make_detection, status_for

from sigwatch.model import Severity
from sigwatch.web.store import DetectionStore


def _filled(count: int = 7) -> DetectionStore:
    store = DetectionStore(None)
    for n in range(count):
        store.add(make_detection(
            n, severity=Severity.CRITICAL if n % 3 == 0 else Severity.ERROR,
            source="kernel" if n % 2 else "training"))
    return store


class TestList:
    def test_pages_follow_the_cursor_to_the_end(self, serve) -> None:
        """limit=3 over 7 detections: 3, 3, 1, each newest first, no item twice or missed."""
        s = serve(store=_filled(7))
        seen: list[int] = []
        cursor = ""
        pages = 0
        while True:
            doc = json.loads(s.get(f"/api/v1/detections?limit=3{cursor}").body)
            seen += [d["line"] for d in doc["detections"]]
            pages += 1
            if doc["next_cursor"] is None:
                break
            cursor = f"&cursor={doc['next_cursor']}"

        assert ([16, 15, 14, 13, 12, 11, 10], 3) == (seen, pages)

    def test_a_new_detection_does_not_shift_the_next_page(self, serve) -> None:
        """Unlike an offset, the cursor is stable while detections arrive."""
        s = serve(store=_filled(4))
        first = json.loads(s.get("/api/v1/detections?limit=2").body)
        s.store.add(make_detection(99))

        second = json.loads(s.get(f"/api/v1/detections?limit=2&cursor={first['next_cursor']}")
                            .body)

        assert [11, 10] == [d["line"] for d in second["detections"]]

    @pytest.mark.parametrize(("query", "lines"), [
        ("severity=critical", [16, 13, 10]),
        ("severity=critical,error&source=kernel", [15, 13, 11]),
        ("severity=critical&severity=error&source=kernel", [15, 13, 11]),
        ("source=training&severity=critical", [16, 10]),
        ("signature=cuda_out_of_memory&limit=2", [16, 15]),
        ("signature=other", []),
        ("severity=&signature=&source=", [16, 15, 14, 13, 12, 11, 10]),
    ])
    def test_filters(self, serve, query: str, lines: list[int]) -> None:
        """Severity (repeatable or comma-separated), signature and source; empty = any."""
        doc = json.loads(serve(store=_filled(7)).get(f"/api/v1/detections?{query}").body)

        assert lines == [d["line"] for d in doc["detections"]]

    def test_items_are_the_stable_detection_json(self, serve) -> None:
        """Each item is Detection.to_json() unchanged, with total and limit beside."""
        d = make_detection(0)
        store = DetectionStore(None)
        store.add(d)

        doc = json.loads(serve(store=store).get("/api/v1/detections").body)

        assert {"detections": [d.to_json()], "total": 1, "limit": 50,
                "next_cursor": None} == doc


class TestBadParameters:
    @pytest.mark.parametrize(("query", "parameter"), [
        ("limit=0", "limit"), ("limit=501", "limit"), ("limit=abc", "limit"),
        ("limit=-1", "limit"), ("limit=1e3", "limit"), ("limit=%EF%BC%95", "limit"),
        ("limit=1&limit=2", "limit"), ("cursor=0", "cursor"), ("cursor=x", "cursor"),
        ("cursor=99999999999999999999999", "cursor"), ("severity=loud", "severity"),
        ("severity=error,,bad", "severity"), ("sort=time", "sort"), ("Limit=5", "Limit"),
        ("source=" + "x" * 201, "source"), ("signature=a&signature=b", "signature"),
    ])
    def test_a_bad_parameter_is_a_400_naming_it(self, serve, query: str, parameter: str,
                                                ) -> None:
        """Never a 500: a JSON error with the parameter and a message a person can act on."""
        reply = serve(store=_filled(2)).get(f"/api/v1/detections?{query}")
        doc = json.loads(reply.body)

        assert (400, "application/json; charset=utf-8", parameter) == (
            reply.status, reply.headers["content-type"], doc["error"]["parameter"])
        assert doc["error"]["message"]

    @pytest.mark.parametrize("query", ["limit=%ff", "a=%zz%ff", "&".join(["x=1"] * 60)])
    def test_an_unreadable_query_string_is_a_400(self, serve, query: str) -> None:
        """Bad UTF-8 or too many fields: 400, not a crash."""
        reply = serve().get(f"/api/v1/detections?{query}")

        assert 400 == reply.status
        assert "error" in json.loads(reply.body)


class TestOne:
    def test_one_detection_with_its_relations(self, serve, library) -> None:
        """The detection and the ids of earlier ones of its signature."""
        store = DetectionStore(None)
        found = engine_store(library, store)
        later = [d for d in found if d.signature == "cuda_device_side_assert"][-1]

        doc = json.loads(serve(store=store).get(f"/api/v1/detections/{later.event_id}").body)

        assert later.to_json() == doc["detection"]
        assert [d.event_id for d in found if d.signature == later.signature][:-1] == doc[
            "earlier"]

    @pytest.mark.parametrize("event_id", ["0" * 24, "nothex", "%3Cscript%3E"])
    def test_unknown_or_malformed_id_is_a_json_404(self, serve, event_id: str) -> None:
        """Not held (or cannot be an id): 404 JSON, the id not echoed as HTML."""
        reply = serve().get(f"/api/v1/detections/{event_id}")

        assert (404, "application/json; charset=utf-8") == (
            reply.status, reply.headers["content-type"])


class TestCatalogues:
    def test_sources_list_reader_health(self, serve, library) -> None:
        """Each configured source with lines, bytes, lag and its unit, last read, errors."""
        doc = json.loads(serve(status=status_for(library)).get("/api/v1/sources").body)

        assert ["training", "kernel"] == [s["name"] for s in doc["sources"]]
        assert {"name", "kind", "streams", "lines", "bytes", "lag", "lag_unit", "last_read",
                "errors"} == set(doc["sources"][0])

    def test_signatures_list_the_loaded_library(self, serve, library) -> None:
        """Every loaded signature with title, severity, area and the fix's summary."""
        doc = json.loads(serve(status=status_for(library)).get("/api/v1/signatures").body)
        oom = next(s for s in doc["signatures"] if s["id"] == "cuda_out_of_memory")

        assert len(library.signatures) == len(doc["signatures"])
        assert ("accelerator", "error") == (oom["area"], oom["severity"])
        assert oom["summary"]

    def test_catalogues_take_no_parameters(self, serve) -> None:
        """A parameter where none is expected is a 400, not silently ignored."""
        assert 400 == serve().get("/api/v1/sources?limit=3").status
