"""What a log writer or a client controls must not break a page or drive a terminal.

A ``limit`` or ``cursor`` of thousands of digits is a 400 (Python refuses to parse an int of
more than 4,300 digits: it was a 500 and a traceback). Lone ESC, C1 controls and bidirectional
overrides in log lines, and file names that are not UTF-8, are shown as escapes on the page;
the JSON API keeps the exact text (as the event log does).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.web import make_detection

from sigwatch.web.store import DetectionStore

HUGE = "9" * 4301

# Undecodable bytes of a file name, as os.fsdecode hands them over.
BAD_PATH = os.fsdecode(b"/var/log/training/bad\xff\xfe.log")
HOSTILE_TEXT = "ESC \x1b]0;owned\x07 CSI \x9b31m NEL \x85 RTL \u202etxt.exe"
RAW = ("\x1b", "\x07", "\x9b", "\x85", "\u202e")


def _hostile(n: int = 0):  # noqa: ANN202
    return make_detection(n, path=BAD_PATH, text=HOSTILE_TEXT,
                          context=("before \x1b[2J\x9d", "ok line"),
                          captures=(("who", "\u202eevil"),))


class TestHugeNumbers:
    @pytest.mark.parametrize("param", ["limit", "cursor"])
    def test_thousands_of_digits_are_a_400_naming_the_parameter(self, serve, param) -> None:
        """Not a 500: the value is refused before Python tries to make an int of it."""
        s = serve(store=DetectionStore(None))

        reply = s.get(f"/api/v1/detections?{param}={HUGE}")

        assert 400 == reply.status
        assert param == json.loads(reply.body)["error"]["parameter"]

    @pytest.mark.parametrize("param", ["limit", "cursor"])
    def test_thousands_of_digits_on_the_page_are_a_400_page(self, serve, param) -> None:
        s = serve(store=DetectionStore(None))

        assert 400 == s.get(f"/?{param}={HUGE}").status


class TestControlCharacters:
    @pytest.mark.parametrize("page", ["index", "detection"])
    def test_controls_and_overrides_are_shown_escaped_on_the_page(self, serve, page) -> None:
        """ESC, BEL, C1 (CSI, NEL) and U+202E never reach the HTML raw; they read as escapes."""
        store = DetectionStore(None)
        store.add(_hostile())
        s = serve(store=store)
        path = "/" if page == "index" else f"/detections/{_hostile().event_id}"

        reply = s.get(path)
        text = reply.text

        assert 200 == reply.status
        assert [] == [c for c in RAW if c in text]
        assert "ESC \\x1b]0;owned\\x07 CSI \\x9b31m NEL \\x85 RTL \\u202etxt.exe" in text
        if page == "detection":
            assert "before \\x1b[2J\\x9d" in text
            assert "\\u202eevil" in text


class TestNonUTF8FileName:
    @pytest.mark.parametrize("path", ["/", "/detections/{id}", "/api/v1/detections",
                                      "/api/v1/detections/{id}"])
    def test_every_view_of_the_detection_answers(self, serve, path: str) -> None:
        """Before: 500 on every view while the detection was held."""
        store = DetectionStore(None)
        store.add(_hostile())
        s = serve(store=store)

        reply = s.get(path.format(id=_hostile().event_id))

        assert 200 == reply.status
        if path.startswith("/api/"):
            doc = json.loads(reply.body)
            held = doc["detections"][0] if "detections" in doc else doc["detection"]
            assert BAD_PATH == held["path"]  # exact: os.fsencode gives the bytes back
            assert HOSTILE_TEXT == held["text"]
        else:
            assert "bad\\xff\\xfe.log" in reply.text

    def test_the_store_keeps_the_name_across_a_restart(self, tmp_path: Path) -> None:
        """Appended, compacted and read back with the same bytes and the same event id."""
        store = DetectionStore(tmp_path / "recent.jsonl", capacity=10)
        assert store.add(_hostile(0))
        store.close()
        again = DetectionStore(tmp_path / "recent.jsonl", capacity=10)

        [held] = again.items()

        assert (BAD_PATH, HOSTILE_TEXT) == (held.detection.path, held.detection.text)
        assert _hostile(0).event_id == held.event_id
        assert 0 == again.skipped + again.write_errors


class TestResponseCap:
    def test_a_page_of_big_detections_stops_at_the_byte_cap_and_pages_on(self, serve) -> None:
        """60 detections at their caps (about 22 KiB each) with limit=500: each response stays
        under MAX_RESPONSE_BYTES and the cursor leads to every one, none twice."""
        from sigwatch.model import cap_detection
        from sigwatch.web.api import MAX_RESPONSE_BYTES

        store = DetectionStore(None)
        for n in range(60):
            big = make_detection(n, text="t" * 100_000,
                                 context=tuple("c" * 3000 for _ in range(10)))
            store.add(cap_detection(big)[0])
        s = serve(store=store)
        seen: list[int] = []
        sizes: list[int] = []
        cursor = ""
        while True:
            reply = s.get(f"/api/v1/detections?limit=500{cursor}")
            sizes.append(len(reply.body))
            doc = json.loads(reply.body)
            seen += [d["line"] for d in doc["detections"]]
            if doc["next_cursor"] is None:
                break
            cursor = f"&cursor={doc['next_cursor']}"

        assert sorted(seen) == list(range(10, 70)) and len(seen) == 60
        assert 1 < len(sizes)
        assert max(sizes) <= MAX_RESPONSE_BYTES
