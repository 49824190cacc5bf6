"""``ContainerFramer``: CRI and Docker json-file records back into whole lines."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from sigwatch.clock import FakeClock
from sigwatch.framing.container import AutoFramer, ContainerFramer, detect_format, framer_for
from sigwatch.framing.lines import LineFramer
from sigwatch.model import StreamInfo
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened

T = "2024-11-20T10:02:11.123456789Z"
EPOCH = datetime(2024, 11, 20, 10, 2, 11, tzinfo=UTC).timestamp() + 0.123456789
OOM_HEAD = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
OOM_TAIL = ("GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free. "
            "Of the allocated memory 75.02 GiB is allocated by PyTorch")


def cri(stream: str, tag: str, message: str, stamp: str = T) -> bytes:
    return f"{stamp} {stream} {tag} {message}\n".encode()


def docker(log: str, stream: str = "stderr", stamp: str = T) -> bytes:
    return (json.dumps({"log": log, "stream": stream, "time": stamp}) + "\n").encode()


def texts(lines: list) -> list[str]:  # type: ignore[type-arg]
    return [seg.data.decode().rstrip("\n") for seg in lines]


def test_the_format_is_recognised_from_the_first_line() -> None:
    assert "cri" == detect_format(cri("stdout", "F", "hello"))
    assert "docker" == detect_format(docker("hello\n"))
    assert "plain" == detect_format(b"2024-11-20T10:02:11Z stdout hello\n")
    assert "plain" == detect_format(b'{"level":"info","msg":"x"}\n')


def test_cri_full_records_are_lines_with_their_time_and_stream() -> None:
    framer = ContainerFramer()
    data = cri("stdout", "F", "step 1") + cri("stderr", "F", "warning: x")

    lines = framer.feed(data)

    assert ["step 1", "warning: x"] == texts(lines)
    assert [0, len(cri("stdout", "F", "step 1"))] == [s.offset for s in lines]
    assert [EPOCH, EPOCH] == [s.time for s in lines]
    assert ["stdout", "stderr"] == [s.tag for s in lines]
    assert "cri" == framer.format


def test_cri_partial_records_are_one_whole_line_at_the_first_records_position() -> None:
    framer = ContainerFramer()
    first = cri("stderr", "P", OOM_HEAD)
    data = cri("stdout", "F", "before") + first + cri("stderr", "F", OOM_TAIL)

    lines = framer.feed(data)

    assert ["before", OOM_HEAD + OOM_TAIL] == texts(lines)
    assert len(cri("stdout", "F", "before")) == lines[1].offset
    assert len(data) == lines[1].next_offset


def test_a_partial_line_holds_back_later_lines_so_positions_only_grow() -> None:
    framer = ContainerFramer()
    partial = cri("stderr", "P", "part one, ")
    other = cri("stdout", "F", "interleaved stdout")
    last = cri("stderr", "F", "part two")

    held = framer.feed(partial + other)
    assert [] == held
    assert 0 == framer.committed_offset  # a restart re-reads from the partial's first record

    rest = framer.feed(last)
    assert ["part one, part two", "interleaved stdout"] == texts(rest)
    assert [0, len(partial)] == [s.offset for s in rest]
    assert len(partial + other + last) == framer.committed_offset


def test_cri_record_split_across_reads_is_framed_once() -> None:
    framer = ContainerFramer()
    data = cri("stderr", "P", OOM_HEAD) + cri("stderr", "F", OOM_TAIL)

    out = []
    for i in range(0, len(data), 7):
        out += framer.feed(data[i:i + 7])

    assert [OOM_HEAD + OOM_TAIL] == texts(out)


def test_docker_partial_records_lack_the_newline_and_are_joined() -> None:
    framer = ContainerFramer()
    data = docker(OOM_HEAD) + docker("stdout line\n", "stdout") + docker(OOM_TAIL + "\n")

    lines = framer.feed(data)

    assert [OOM_HEAD + OOM_TAIL, "stdout line"] == texts(lines)
    assert [0, len(docker(OOM_HEAD))] == [s.offset for s in lines]
    assert EPOCH == lines[0].time
    assert "docker" == framer.format


def test_a_line_that_is_not_a_record_passes_through_and_is_counted() -> None:
    framer = ContainerFramer("cri")

    lines = framer.feed(cri("stdout", "F", "ok") + b"garbage line\n")

    assert ["ok", "garbage line"] == texts(lines)
    assert 1 == framer.malformed


def test_plain_files_pass_through_unchanged() -> None:
    framer = ContainerFramer()

    lines = framer.feed(b"plain one\nplain two\n")

    assert ["plain one", "plain two"] == texts(lines)
    assert "plain" == framer.format


def test_reassembly_is_bounded_by_the_line_limit() -> None:
    framer = ContainerFramer(max_line_bytes=1000)
    data = b"".join(cri("stderr", "P", "y" * 400) for _ in range(10)) + cri("stderr", "F", "end")

    (line,) = framer.feed(data)

    assert 1001 == len(line.data)
    assert line.truncated


def test_finish_flushes_a_partial_line_as_unterminated() -> None:
    framer = ContainerFramer()
    framer.feed(cri("stderr", "P", "never finished"))

    (line,) = framer.finish()

    assert "never finished" == texts([line])[0]
    assert line.unterminated


def test_an_unknown_format_option_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown container log format"):
        ContainerFramer("json")


def test_a_cri_line_split_over_partial_records_gives_one_detection_with_the_whole_line() -> None:
    patterns, errors = load_patterns([builtin_pattern_dir()])
    assert [] == errors
    sink = CollectingSink()
    pipeline = Pipeline(Engine(patterns), [sink], clock=FakeClock())
    handle = pipeline.new_handle()
    pipeline.open(StreamOpened(handle, StreamInfo("pods", "/var/log/pods/x/0.log", "pod-key")))
    framer = ContainerFramer()
    head = cri("stdout", "F", "epoch 3 step 120") + cri("stderr", "P", OOM_HEAD)
    data = head + cri("stderr", "P", OOM_TAIL[:30]) + cri("stderr", "F", OOM_TAIL[30:])

    found = pipeline.process(handle, framer.feed(data))

    oom = [d for d in found if d.signature == "cuda_out_of_memory"]
    assert 1 == len(oom), [d.signature for d in found]
    assert OOM_HEAD + OOM_TAIL == oom[0].text
    assert len(cri("stdout", "F", "epoch 3 step 120")) == oom[0].offset


def test_reset_forgets_pending_records_like_a_line_framer() -> None:
    framer = ContainerFramer()
    framer.feed(cri("stderr", "P", "old content ") + b"2024-11-20T10:02")
    assert 0 < framer.pending_bytes

    framer.reset(0)
    lines = framer.feed(cri("stdout", "F", "new content"))

    assert ["new content"] == texts(lines)
    assert (0, 0) == (lines[0].offset, framer.pending_bytes)


class TestAutoFramer:
    """``format = "auto"`` (the default of file sources and of ``scan``)."""

    def test_a_cri_file_is_recognised_and_its_partial_records_joined(self) -> None:
        """The first line decides; P records become one line at the first record."""
        framer = AutoFramer()
        data = cri("stderr", "P", OOM_HEAD) + cri("stderr", "F", OOM_TAIL)

        lines = framer.feed(data[:10]) + framer.feed(data[10:])

        assert [OOM_HEAD + OOM_TAIL] == texts(lines)
        assert "cri" == framer.format
        assert len(data) == framer.committed_offset

    def test_a_plain_file_is_framed_exactly_as_a_line_framer_frames_it(self) -> None:
        """Same segments, offsets and cut long lines as LineFramer with the same limit."""
        data = b"step 1\n" + b"x" * 3000 + b"\nlast line without newline"
        auto, plain = AutoFramer(max_line_bytes=1000, offset=7), LineFramer(1000, 7)

        got = [*auto.feed(data[:5]), *auto.feed(data[5:]), *auto.finish()]
        expected = [*plain.feed(data), *plain.finish()]

        assert expected == got
        assert "plain" == auto.format

    def test_nothing_is_handed_out_or_committed_before_the_first_newline(self) -> None:
        """A restart before the first line is whole resumes where the stream started."""
        framer = AutoFramer(offset=42)

        assert [] == framer.feed(b"2024-11-20T10:02:11Z stdout F no newline yet")
        assert 42 == framer.committed_offset
        assert len(b"2024-11-20T10:02:11Z stdout F no newline yet") == framer.pending_bytes

    def test_a_first_line_longer_than_any_record_is_plain(self) -> None:
        """No newline within the probe limit: no container record is that long."""
        framer = AutoFramer(max_line_bytes=1024)
        framer.feed(b"y" * (framer.probe_limit + 1))

        assert "plain" == framer.format

    def test_after_a_reset_the_format_is_recognised_again(self) -> None:
        """A truncated file rewritten in another format is read in the new one."""
        framer = AutoFramer()
        framer.feed(b"plain text line\n")
        framer.reset(0)

        lines = framer.feed(cri("stdout", "F", "now a pod log"))

        assert ["now a pod log"] == texts(lines)
        assert "cri" == framer.format

    def test_framer_for_builds_each_format(self) -> None:
        """plain is a bare LineFramer (no cost); the others frame records."""
        assert isinstance(framer_for("plain"), LineFramer)
        assert isinstance(framer_for("auto"), AutoFramer)
        assert ["cri", "docker"] == [framer_for(f).format for f in ("cri", "docker")]

    def test_an_unknown_format_is_refused(self) -> None:
        """A typo is an error naming the choices, not a silent plain read."""
        with pytest.raises(ValueError, match="unknown log format 'json'"):
            framer_for("json")
