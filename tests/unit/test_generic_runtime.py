"""The generic layer as the daemon runs it: pieces, holds, restarts, both drivers.

A tail reads a file in arbitrary pieces; a traceback may be cut anywhere, and its rest may hold
no line any interest selects. A finished traceback waits (``hold_seconds``) for the lines that
say whether the process went on, and fires on time when none come. While it waits, the runtime
keeps its lines for a restart (``replay_floor``, ``held``). The per-line driver (the reference)
and the per-chunk driver give the same detections.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from support.generic import generic_scan, loud, only, text_of

from sigwatch.app import build_generic
from sigwatch.clock import FakeClock
from sigwatch.framing.lines import LineFramer
from sigwatch.model import Detection, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened

REAL = Path(__file__).resolve().parents[1] / "corpus" / "real"
TRACEBACK = text_of('''
    step 10 loss 2.31
    [rank2]: Traceback (most recent call last):
    [rank2]:   File "/job/train.py", line 71, in <module>
    [rank2]:     main()
    [rank2]:   File "/job/train.py", line 52, in main
    [rank2]:     batch = prefetch.get()
    [rank2]: queue.Empty
    ''')
MIXED = TRACEBACK + text_of('''
    E1120 12:00:00.123456  1234 io.cc:12] failed to flush checkpoint to /nfs/ckpt/step_10
    Fatal Python error: Aborted

    Current thread 0x00007f4ebf9d3740 (most recent call first):
      File "/job/model.py", line 9 in forward
    terminate called after throwing an instance of 'std::runtime_error'
      what():  NCCL communicator aborted
    Segmentation fault (core dumped)
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
           65536         16384     float     sum      -1    40.01    1.64    3.07      5    39.80    1.65    3.09      0
    [TRT] [E] 1: [defaultAllocator.cpp::deallocate::35] Error Code 1: Cuda Runtime (an illegal memory access)
    Exception in thread Thread-7:
    Traceback (most recent call last):
      File "/job/logger.py", line 3, in run
        push()
    ConnectionError: wandb unreachable
    ''')


def _key(d: Detection) -> str:
    return json.dumps(d.to_json(), sort_keys=True)


class _Daemon:
    """One stream through the real pipeline, fed and ticked like the daemon's runtime."""

    def __init__(self, *, replay_below: int = -1, pending: tuple[int, ...] = (),
                 position: int = 0, lineno: int = 0,
                 patterns: PatternSet | None = None) -> None:
        self.clock = FakeClock()
        self.sink = CollectingSink()
        self.pipeline = Pipeline(Engine(patterns or PatternSet(())), [self.sink],
                                 clock=self.clock,
                                 detectors=[build_generic(clock=self.clock)])
        self.framer = LineFramer(offset=position)
        self.pipeline.open(StreamOpened(1, StreamInfo("train", "t.log", "t.log"),
                                        position=position, lineno=lineno,
                                        replay_below=replay_below, pending=pending))

    def feed(self, text: str | bytes) -> list[Detection]:
        data = text.encode() if isinstance(text, str) else text
        return self.pipeline.process(1, self.framer.feed(data))

    def wait(self, seconds: float) -> list[Detection]:
        self.clock.advance(seconds)
        return self.pipeline.tick()


class TestPieces:
    @pytest.mark.parametrize("pieces", [(1,), (7, 300), (64, 1, 4096), (33,)],
                             ids=lambda p: "-".join(map(str, p)))
    def test_any_cut_gives_the_detections_of_the_whole(self, pieces: tuple[int, ...]) -> None:
        """Fed in pieces of any size, the same detections as read in one go."""
        whole = sorted(_key(d) for d in generic_scan(MIXED))

        cut = sorted(_key(d) for d in generic_scan(MIXED, pieces=pieces))

        assert whole == cut
        assert len(whole) >= 6  # the abort, terminate and segfault lines are one crash

    def test_the_rest_of_a_traceback_that_no_interest_selects_is_read(self) -> None:
        """The second read holds only a source line and ``queue.Empty``: no literal any
        interest looks for, yet the traceback is finished from it."""
        head, tail = TRACEBACK.split("[rank2]:     batch = prefetch.get()\n")
        daemon = _Daemon()

        daemon.feed(head)
        daemon.feed("[rank2]:     batch = prefetch.get()\n" + tail)
        found = daemon.wait(60.0)

        assert ("exception", "queue.Empty") in only(found, "generic_traceback").captures

    def test_line_and_chunk_drivers_agree(self) -> None:
        """The per-line reference and the per-chunk driver, cut the same way."""
        line = sorted(_key(d) for d in generic_scan(MIXED, pieces=(40, 900), mode="line"))
        chunk = sorted(_key(d) for d in generic_scan(MIXED, pieces=(40, 900), mode="chunk"))

        assert line == chunk

    def test_line_and_chunk_drivers_agree_on_every_real_excerpt(
            self, library: PatternSet) -> None:
        """The real corpus through the whole library and the generic layer, in uneven pieces:
        the same detections either way (root causes and folds included)."""
        excerpts = sorted(REAL.glob("*/*.toml"))
        texts = [tomllib.loads(p.read_text(encoding="utf-8"))["text"] for p in excerpts]
        assert len(texts) > 200

        for pieces in ((97, 5, 4096), (1 << 20,)):
            line = [sorted(_key(d) for d in generic_scan(t, library=library, pieces=pieces,
                                                         mode="line")) for t in texts]
            chunk = [sorted(_key(d) for d in generic_scan(t, library=library, pieces=pieces,
                                                          mode="chunk")) for t in texts]

            assert line == chunk
            assert sum(len(found) for found in chunk) > 300


class TestHold:
    def test_a_finished_traceback_fires_when_the_hold_ends(self) -> None:
        """Nothing follows the exception line (the process died): it fires on time."""
        daemon = _Daemon()

        assert [] == daemon.feed(TRACEBACK)
        assert daemon.pipeline.next_deadline() is not None
        assert [] == daemon.wait(29.0)
        found = daemon.wait(2.0)

        assert "generic_traceback" == only(found, "generic_traceback").signature
        assert daemon.pipeline.next_deadline() is None

    def test_progress_during_the_hold_keeps_it_quiet(self) -> None:
        """The rank went on: the traceback ended nothing."""
        daemon = _Daemon()

        daemon.feed(TRACEBACK)
        daemon.wait(5.0)
        daemon.feed("[rank2]: step 11 loss 2.29\n")

        assert [] == loud(daemon.wait(60.0))

    def test_enough_lines_of_the_rank_end_the_hold_without_waiting(self) -> None:
        """After the window of lines, the verdict does not wait for the clock."""
        daemon = _Daemon()
        daemon.feed(TRACEBACK)

        found = daemon.feed("".join(f"[rank2]: shutting down worker {i}\n" for i in range(30)))

        assert "generic_traceback" == only(found, "generic_traceback").signature


class TestRestart:
    def test_an_open_traceback_keeps_its_lines_and_its_pending_detection(self) -> None:
        """``need`` names the header's position and the exception line as held."""
        daemon = _Daemon()
        daemon.feed(TRACEBACK)

        need = daemon.pipeline.need(1)

        header = TRACEBACK.index("[rank2]: Traceback")
        exception = TRACEBACK.index("[rank2]: queue.Empty")
        assert (header, 2) == (need.position, need.lineno)  # the header is line 2
        assert (exception,) == need.held

    def test_a_held_detection_is_delivered_once_after_a_restart(self) -> None:
        """Replayed from the floor with the held offset pending: delivered after the hold."""
        first = _Daemon()
        first.feed(TRACEBACK)
        need = first.pipeline.need(1)
        assert need.position is not None and need.lineno is not None

        again = _Daemon(replay_below=len(TRACEBACK), pending=need.held,
                        position=need.position, lineno=need.lineno - 1)
        again.feed(TRACEBACK[need.position:])
        found = again.wait(60.0)

        assert 1 == len([d for d in found if d.signature == "generic_traceback"])

    def test_a_delivered_detection_is_not_delivered_again_on_replay(self) -> None:
        """Lines below the replay point rebuild state only."""
        daemon = _Daemon(replay_below=len(TRACEBACK))

        daemon.feed(TRACEBACK)

        assert [] == daemon.wait(60.0)


class TestWaitingRecords:
    def test_an_information_only_record_waits_then_is_delivered_once(self) -> None:
        """While it waits for the lines after it, it is held (a restart keeps it); when the
        hold ends with nothing else, it is information."""
        daemon = _Daemon()

        assert [] == daemon.feed("ERROR:app:could not parse optional field 'notes'\n")
        assert (0,) == daemon.pipeline.need(1).held
        found = daemon.wait(60.0)

        assert ["generic_error_record"] == [d.signature for d in found]
        assert () == daemon.pipeline.need(1).held

    def test_a_line_a_signature_was_delivered_on_is_not_held(self, tmp_path: Path) -> None:
        """A pending position names every detection on its line: were the record's line kept
        pending, a restart would deliver the signature's detection there a second time. The
        generic layer ranks below it and gives the line up (the record would fold into it)."""
        (tmp_path / "seq.toml").write_text(
            'id = "test_error_seq"\ntitle = "Test Error Seq"\nseverity = "error"\n'
            '[match]\nregex = \'ERROR seq=(?P<seq>\\d+)\'\nkeywords = ["ERROR seq="]\n',
            encoding="utf-8")
        patterns, errors = load_patterns([tmp_path])
        assert [] == errors
        text = "ERROR seq=1 payload\nINFO filler 1\n"
        first = _Daemon(patterns=patterns)

        assert ["test_error_seq"] == [d.signature for d in first.feed(text)]
        need = first.pipeline.need(1)
        assert () == need.held
        again = _Daemon(patterns=patterns, replay_below=len(text), pending=need.held)
        assert [] == again.feed(text) + again.wait(60.0)

        alone = _Daemon()  # without the signature, the same record is held
        alone.feed(text)
        assert (0,) == alone.pipeline.need(1).held
