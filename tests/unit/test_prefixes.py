"""Launcher prefixes, leading timestamps and levels: what ``normalize`` reads off a line."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sigwatch.clock import FakeClock
from sigwatch.framing.normalize import normalize, normalize_line, parse_prefix
from sigwatch.model import StreamInfo
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.scanning import scan_bytes
from sigwatch.sinks.base import CollectingSink

AT = datetime(2024, 11, 20, 10, 2, 11, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("line", "rank", "text"), [
    ("[rank3]: x", "3", "x"),                                    # torchrun
    ("[default0]:y", "0", "y"),                                  # torchrun --tee
    ("  3: z", "3", "z"),                                        # srun --label, right-aligned
    ("0: [rank3]: Traceback", "0/3", "Traceback"),               # srun running torchrun
    ("[1,3]<stderr>:boom", "3", "boom"),                         # Open MPI --tag-output
    ("[1,12]<stdout>: step 4", "12", "step 4"),
    ("(RayWorker pid=123) CUDA error", "pid=123", "CUDA error"),  # Ray actor
    ("(pid=123, ip=10.0.0.1) CUDA error", "pid=123,ip=10.0.0.1", "CUDA error"),
    ("(RayTrainWorker pid=88, ip=10.0.0.2) x", "pid=88,ip=10.0.0.2", "x"),
    ("[2024-11-20 10:02:11,123] [INFO] [logging.py:96:log_dist] [Rank 0] msg", "0", "msg"),
    ("2024-11-20T10:02:11Z [rank2]: oops", "2", "oops"),          # a shipper's stamp outside
    ("Fri Sep 22 11:52:15 2017[1,7]<stderr>:Segmentation fault",  # mpirun --timestamp-output
     "7", "Segmentation fault"),
    ("29.127.65.230: [rank0]: AttributeError: x", "29.127.65.230/0", "AttributeError: x"),  # pdsh
    ("10.0.0.7: Traceback (most recent call last):", "10.0.0.7",
     "Traceback (most recent call last):"),
    ("text-embeddings-1  | Error: Could not create backend",       # docker compose v2
     "text-embeddings-1", "Error: Could not create backend"),
    ("api_1  | 8:39AM ERR failed to load model", "api_1",          # docker compose v1
     "8:39AM ERR failed to load model"),
    ("trainer-12 | [rank3]: Traceback", "trainer-12/3", "Traceback"),  # compose runs torchrun
    ("[pod/vllm-decode-7f9c/vllm] ERROR boom", "vllm-decode-7f9c",      # kubectl --prefix
     "ERROR boom"),
])
def test_launcher_prefixes_give_the_rank_and_are_removed(line: str, rank: str, text: str) -> None:
    assert [(rank, text)] == normalize(line)


@pytest.mark.parametrize("line", [
    "retry 10: failed",                  # a number and colon in the middle of a line
    "12:30:45 start",                    # a time of day
    "8080: bind failed",                 # a port number at the start of a line
    "29500: address already in use",     # torch's default master port
    "10.0.0.1:29500: connect failed",    # host:port
    "8080/tcp open",
    "007: leading zero is not a task id",
    "step [rank3] in the middle: no",
    "(pid 123) not Ray's shape",
    "[1,3] missing the stream tag",
    "Fri Sep 22 11:52:15 2017[build] no rank tag after the stamp",
    "Tue Sep 22 11:52:15 is not a ctime stamp[1,2]<stderr>:x",
    "10.0.0.256: not an address",
    "1.2.3.4:29500: connect failed",
    "10.0.0.7 is the master",
    "iteration 3 | loss 2.1 |",          # a progress line's columns
    "trainer | no index before the bar",
    "node-1| no padding before the bar",
    "| gpu-0 | 45C |",                    # a table row
    "[pod/name] no container",
])
def test_near_misses_are_not_taken_for_a_rank(line: str) -> None:
    assert [(None, line)] == normalize(line)


def test_an_application_timestamp_after_the_rank_stays_in_the_text() -> None:
    line = "[rank0]:[W1120 10:02:11.690404271 ProcessGroupNCCL.cpp:1168] Warning: x"

    (part,) = normalize_line(line, year_hint=2024, tz=UTC)

    assert "0" == part.rank
    assert part.text.startswith("[W1120 10:02:11.690404271 ProcessGroupNCCL.cpp")
    assert AT + 0.690404271 == pytest.approx(part.time)
    assert "warning" == part.level


@pytest.mark.parametrize(("line", "level", "offset"), [
    ("2024-11-20T10:02:11.5Z INFO starting", "info", 0.5),
    ("I1120 10:02:11.250000  1234 main.cc:10] hello", "info", 0.25),
    ("E1120 10:02:11.000000  1234 main.cc:10] bad", "error", 0.0),
    ("Nov 20 10:02:11 node01 kernel: x", None, 0.0),
    ("2024-11-20 10:02:11,000 - WARNING - slow", "warning", 0.0),
    ("ERROR:root:no timestamp here", "error", None),
])
def test_leading_timestamps_and_levels_are_recognised_and_left_in_the_text(
        line: str, level: str | None, offset: float | None) -> None:
    (part,) = normalize_line(line, year_hint=2024, tz=UTC)

    assert (None, line, level) == (part.rank, part.text, part.level)
    assert (None if offset is None else AT + offset) == part.time


def test_mpiruns_ctime_stamp_is_the_lines_time() -> None:
    (part,) = normalize_line("Wed Nov 20 10:02:11 2024[1,0]<stdout>:step 5", tz=UTC)

    assert ("0", "step 5", AT) == (part.rank, part.text, part.time)


def test_the_fast_path_does_not_compute_times() -> None:
    assert parse_prefix("2024-11-20T10:02:11Z x").time is None
    assert parse_prefix("2024-11-20T10:02:11Z x", want_time=True).time == AT


def test_carriage_return_parts_inherit_rank_and_time() -> None:
    parts = normalize_line("[rank1]: 2024-11-20T10:02:11Z 45%|####\rRuntimeError: boom",
                           tz=UTC)

    assert [("1", AT), ("1", AT)] == [(p.rank, p.time) for p in parts]


TWO_STEP = """
id = "segv_gethandle"
title = "Segfault In GetHandle"
severity = "error"
[match]
regex = 'SIGSEGV'
[[match.then]]
regex = 'GetHandle'
within_lines = 5
[context]
before = 3
"""


@pytest.mark.parametrize("tag", [
    "[rank{r}]: ", "{r}: ", "[1,{r}]<stderr>:", "(RayWorker pid=10{r}) ", "0: [rank{r}]: "])
def test_interleaved_multi_rank_tracebacks_give_one_detection_per_rank_with_its_context(
        write_pattern: Callable[[str, str], Path], tag: str) -> None:
    root = write_pattern("segv_gethandle", TWO_STEP)
    lines = []
    for body in ("loading shard", "*** SIGSEGV received", "#0 pjrt::GetHandle"):
        for r in (0, 1):
            lines.append(tag.format(r=r) + f"{body} r{r}")
    patterns, errors = load_patterns([root])
    assert [] == errors
    sink = CollectingSink()
    pipeline = Pipeline(Engine(patterns), [sink], clock=FakeClock())

    scan_bytes(pipeline, StreamInfo("job", "job.out", "k"), ("\n".join(lines) + "\n").encode())

    found = sorted(sink.detections, key=lambda d: d.rank or "")
    assert 2 == len(found), [(d.rank, d.text) for d in found]
    assert [normalize(tag.format(r=r) + "x")[0][0] for r in (0, 1)] == [d.rank for d in found]
    for r, det in enumerate(found):
        assert det.context and all(line.endswith(f"r{r}") for line in det.context), det.context
