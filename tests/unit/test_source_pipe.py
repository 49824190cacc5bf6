"""``PipeSource``: FIFOs and descriptors never block the daemon, and lines keep byte positions."""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.source_driver import SourceDriver, stop_all

from sigwatch.sources.base import Source
from sigwatch.sources.pipe import PipeSource


@pytest.fixture(autouse=True)
def _stop_sources() -> Iterator[None]:
    yield
    stop_all()


def within(seconds: float, action: Callable[[], object]) -> object:
    """Run ``action`` in a thread; fail (without hanging the suite) if it does not return."""
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(action()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"blocked for more than {seconds}s"
    return result[0] if result else None


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "job.fifo"
    os.mkfifo(path)
    return path


def writer(path: Path) -> int:
    """A writer process's end of the FIFO (the reader must already be open)."""
    return os.open(path, os.O_WRONLY | os.O_NONBLOCK)


def factory(path: Path, errors: list[str] | None = None) -> Callable[[], Source]:
    def make() -> Source:
        return PipeSource("job", path=str(path),
                          on_error=lambda _n, e: errors.append(e) if errors is not None else None)
    return make


def test_a_fifo_without_a_writer_never_blocks_open_or_read(fifo: Path) -> None:
    d = SourceDriver(factory(fifo))

    within(5, d.start)
    events = within(5, d.poll)

    assert 1 == events  # only StreamOpened: nothing to read, and no end-of-file either
    assert [] == d.closed


def test_a_fifo_without_a_writer_is_not_readable_so_the_daemon_can_sleep(fifo: Path) -> None:
    d = SourceDriver(factory(fifo))
    source = d.start()
    w = writer(fifo)
    os.write(w, b"one\n")
    os.close(w)
    d.poll()

    assert source.fds()  # type: ignore[attr-defined]
    poller = select.poll()
    for fd in source.fds():  # type: ignore[attr-defined]
        poller.register(fd, select.POLLIN)

    assert [] == poller.poll(0)  # a FIFO whose writers left would otherwise read as EOF forever
    assert ["one"] == d.texts()


def test_lines_keep_their_byte_positions_across_writers(fifo: Path) -> None:
    d = SourceDriver(factory(fifo))
    d.start()
    first = writer(fifo)
    os.write(first, b"alpha\nbe")
    d.poll()
    os.write(first, b"ta\n")
    os.close(first)
    d.poll_until(lambda: len(d.delivered) == 2)

    second = writer(fifo)
    os.write(second, b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    os.close(second)
    d.poll_until(lambda: len(d.delivered) == 3)

    assert ["alpha", "beta"] == d.texts()[:2]
    assert [0, 6, 11] == [x.position for x in d.delivered]
    assert [] == d.closed


def test_restart_continues_the_byte_count_and_says_nothing_can_be_replayed(fifo: Path) -> None:
    d = SourceDriver(factory(fifo))
    d.start()
    w = writer(fifo)
    os.write(w, b"before\n")
    d.poll_until(lambda: len(d.delivered) == 1)
    os.close(w)

    saved = d.snapshot()
    d.stop()
    d.start()
    w = writer(fifo)
    os.write(w, b"after\n")
    os.close(w)
    d.poll_until(lambda: len(d.delivered) == 2)

    assert False is saved["resumable"]
    assert ["before", "after"] == d.texts()
    assert [0, 7] == [x.position for x in d.delivered]
    assert 7 == d.opened[-1].position
    assert [] == d.duplicates()


def test_a_fifo_that_appears_later_is_opened_then(tmp_path: Path) -> None:
    path = tmp_path / "later.fifo"
    d = SourceDriver(factory(path))
    source = d.start()
    d.poll()
    assert source.next_wakeup(0.0) == 1.0

    os.mkfifo(path)
    d.poll()
    w = writer(path)
    os.write(w, b"hello\n")
    os.close(w)
    d.poll_until(lambda: d.texts() == ["hello"])


def test_a_regular_file_is_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_text("not a pipe\n")
    errors: list[str] = []
    d = SourceDriver(factory(path, errors))
    d.start()

    d.poll()

    assert [] == d.delivered
    assert ["is not a named pipe" in e for e in errors] == [True]


def test_a_descriptor_stream_ends_at_eof_with_its_unterminated_last_line() -> None:
    r, w = os.pipe()
    d = SourceDriver(lambda: PipeSource("exec", fd=r, label="stderr", kind="exec"))
    d.start()
    os.write(w, b"Traceback (most recent call last):\nSegmentation fault")
    d.poll()
    assert ["Traceback (most recent call last):"] == d.texts()

    os.close(w)
    d.poll_until(lambda: d.closed)

    assert ["Traceback (most recent call last):", "Segmentation fault"] == d.texts()
    assert "exec" == d.opened[0].kind
    assert "stderr" == d.opened[0].info.path


def test_a_descriptor_stream_without_data_does_not_block() -> None:
    r, w = os.pipe()
    d = SourceDriver(lambda: PipeSource("stdin", fd=r, label="stdin"))
    d.start()

    within(5, d.poll)

    assert [] == d.delivered
    os.close(w)
    d.poll_until(lambda: d.closed)
    assert [True] == [c.clean for c in d.closed]
