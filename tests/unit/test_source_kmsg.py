"""``KmsgSource``: a recorded ``/dev/kmsg`` stream through the same driver as every source."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.source_driver import SourceDriver, stop_all

from sigwatch.sources.base import ReplayNeed, Source
from sigwatch.sources.kmsg import KmsgSource, parse_record, unescape

BOOT = 1_700_000_000.0
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.fixture(autouse=True)
def _stop_sources() -> Iterator[None]:
    yield
    stop_all()


def record(seq: int, text: str, *, usec: int | None = None, pri: int = 3,
           flags: str = "-", meta: tuple[str, ...] = ()) -> str:
    usec = seq * 1000 if usec is None else usec
    out = f"{pri},{seq},{usec},{flags};{text}\n"
    return out + "".join(f" {m}\n" for m in meta)


class Node:
    """A fake node: a recorded kmsg file and a boot id file the test rewrites."""

    def __init__(self, tmp: Path) -> None:
        self.kmsg = tmp / "kmsg"
        self.boot_id = tmp / "boot_id"
        self.boot_id.write_text("boot-a\n")
        self.kmsg.write_text("")
        self.losses: list[int] = []

    def write(self, *records: str) -> None:
        with self.kmsg.open("a") as fh:
            fh.write("".join(records))

    def reboot(self, *records: str) -> None:
        self.boot_id.write_text("boot-b\n")
        self.kmsg.write_text("".join(records))

    def factory(self, **kw: object) -> Callable[[], Source]:
        def make() -> Source:
            return KmsgSource("kernel", path=str(self.kmsg), boot_id_path=str(self.boot_id),
                              boot_time=BOOT, on_loss=lambda _name, n: self.losses.append(n),
                              **kw)  # type: ignore[arg-type]
        return make


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_records_become_lines_at_their_sequence_numbers_with_their_time(node: Node) -> None:
    node.write(record(10, "first"), record(11, XID, usec=2_500_000))
    d = SourceDriver(node.factory())
    d.start()

    d.poll()

    assert ["first", XID] == d.texts()
    assert [10, 11] == [x.position for x in d.delivered]
    assert BOOT + 2.5 == d.delivered[1].time
    assert "kmsg" == d.opened[0].kind


def test_dictionary_lines_are_metadata_not_text(node: Node) -> None:
    node.write(record(1, "pcieport 0000:00:01.0: AER: Corrected error",
                      meta=("SUBSYSTEM=pci", "DEVICE=+pci:0000:00:01.0")),
               record(2, "next"))
    d = SourceDriver(node.factory())
    d.start()

    d.poll()

    assert ["pcieport 0000:00:01.0: AER: Corrected error", "next"] == d.texts()


def test_continuation_fragments_join_into_one_line_at_the_first_sequence(node: Node) -> None:
    node.write(record(5, "EDAC MC0: 1 UE ", flags="c"), record(6, "memory read error", flags="+"),
               record(7, "after"))
    d = SourceDriver(node.factory())
    d.start()

    d.poll()

    assert ["EDAC MC0: 1 UE memory read error", "after"] == d.texts()
    assert [5, 7] == [x.position for x in d.delivered]


def test_a_sequence_gap_is_counted_as_loss(node: Node) -> None:
    node.write(record(1, "a"), record(2, "b"), record(6, "f"))
    source = KmsgSource(path=str(node.kmsg), boot_id_path=str(node.boot_id), boot_time=BOOT,
                        on_loss=lambda _n, c: node.losses.append(c))
    d = SourceDriver(lambda: source)
    d.start()

    d.poll()

    assert [3] == node.losses
    assert 3 == source.lost
    assert ["a", "b", "f"] == d.texts()


def test_epipe_from_the_device_is_survived_and_the_gap_counted(node: Node) -> None:
    node.write(record(1, "a"), record(5, "e"))
    calls = {"n": 0}

    def read(fd: int, size: int) -> bytes:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EPIPE, "Broken pipe")
        return os.read(fd, size)

    source = KmsgSource(path=str(node.kmsg), boot_id_path=str(node.boot_id), boot_time=BOOT,
                        on_loss=lambda _n, c: node.losses.append(c), read=read)
    d = SourceDriver(lambda: source)
    d.start()

    d.poll()

    assert ["a", "e"] == d.texts()
    assert 1 == source.overruns
    assert [3] == node.losses


def test_restart_in_the_same_boot_replays_nothing(node: Node) -> None:
    node.write(record(1, "a"), record(2, XID))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()

    d.restart()
    node.write(record(3, "c"))
    d.poll()

    assert ["a", XID, "c"] == d.texts()
    assert [] == d.replayed
    assert [] == d.duplicates()
    assert [] == node.losses


def test_records_overwritten_while_the_daemon_was_down_are_counted(node: Node) -> None:
    node.write(record(1, "a"), record(2, "b"))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()
    d.snapshot()
    d.stop()
    # The ring buffer wrapped while we were down: 1..4 are gone, 5 and 6 remain.
    node.kmsg.write_text(record(5, "e") + record(6, "f"))

    d.start()
    d.poll()

    assert ["a", "b", "e", "f"] == d.texts()
    assert [2] == node.losses


def test_a_new_boot_starts_fresh(node: Node) -> None:
    node.write(record(100, "old boot"), record(101, "old boot too"))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()
    d.snapshot()
    d.stop()

    node.reboot(record(0, "Linux version 6.8.0"), record(1, XID))
    d.start()
    d.poll()

    assert ["Linux version 6.8.0", XID] == d.texts(d.opened[-1].info.key)
    assert d.opened[0].info.key != d.opened[-1].info.key
    assert -1 == d.opened[-1].replay_below
    assert [] == node.losses


def test_a_new_boot_whose_start_was_overwritten_counts_the_lost_start(node: Node) -> None:
    node.write(record(100, "old boot"))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()
    d.restart()
    d.stop()

    node.reboot(record(40, "first record still in the buffer"))
    d.start()
    d.poll()

    assert [40] == node.losses


def test_restart_replays_from_what_a_detector_still_needs_without_delivering_twice(
        node: Node) -> None:
    node.write(record(1, "a"), record(2, "traceback start"), record(3, "c"))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()
    d.need = lambda _h: ReplayNeed(position=2, lineno=1, lineno_at_end=3)

    d.restart()
    node.write(record(4, "d"))
    d.poll()

    assert ["traceback start", "c"] == [x.text for x in d.replayed]
    assert ["a", "traceback start", "c", "d"] == d.texts()
    assert (2, 1, 4) == (d.opened[-1].position, d.opened[-1].lineno, d.opened[-1].replay_below)
    assert [] == d.duplicates()


def test_a_second_restart_before_the_replay_is_read_keeps_the_delivered_mark(
        node: Node) -> None:
    node.write(record(1, "a"), record(2, "b"), record(3, "c"))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()
    d.need = lambda _h: ReplayNeed(position=2, lineno=1)
    d.restart()
    d.need = lambda _h: ReplayNeed()

    d.restart()  # nothing polled in between
    d.poll()

    assert 4 == d.opened[-1].replay_below
    assert ["a", "b", "c"] == d.texts()


def test_after_a_crash_lines_since_the_last_snapshot_are_read_again_never_lost(
        node: Node) -> None:
    node.write(record(1, "a"))
    d = SourceDriver(node.factory())
    d.start()
    d.poll()
    d.snapshot()
    node.write(record(2, "b"))
    d.poll()

    d.crash()
    d.poll()

    assert ["a", "b", "b"] == d.texts()  # the runtime's event ids make the second one a no-op
    assert 2 == d.opened[-1].position


def test_escaped_bytes_come_back_as_text_but_newlines_stay_visible() -> None:
    assert b"caf\xc3\xa9 back\\slash" == unescape(b"caf\\xc3\\xa9 back\\x5cslash")
    assert b"one\\x0atwo" == unescape(b"one\\x0atwo")


def test_header_fields_are_parsed_and_future_fields_tolerated() -> None:
    rec = parse_record(b"6,339,5140900,-,caller=T1;NVRM: loading")

    assert rec is not None
    assert (339, 5140900, 6, 0, b"NVRM: loading") == (rec.seq, rec.usec, rec.level,
                                                      rec.facility, rec.text)
    assert parse_record(b"not a record") is None


def test_first_start_lookback_skips_old_history(node: Node) -> None:
    node.write(record(1, "boot time", usec=1_000_000), record(2, "recent", usec=999_000_000))
    d = SourceDriver(node.factory(lookback=60.0, wall_clock=lambda: BOOT + 1000.0))
    d.start()

    d.poll()

    assert ["recent"] == d.texts()


def test_unreadable_device_hands_over_to_the_fallback(node: Node, tmp_path: Path) -> None:
    started: list[object] = []

    class Fallback:
        name = "kernel"

        def start(self, saved: object, *, first_start: bool) -> None:
            started.append(saved)

        def poll(self, now: float):  # type: ignore[no-untyped-def]
            return iter(())

        def more_waiting(self) -> bool:
            return False

        def snapshot(self, need: object) -> object:
            return {"cursor": "c1"}

        def next_wakeup(self, now: float) -> float | None:
            return None

        def stop(self):  # type: ignore[no-untyped-def]
            return iter(())

    missing = tmp_path / "no-kmsg"
    source = KmsgSource(path=str(missing), boot_id_path=str(node.boot_id),
                        fallback=lambda: Fallback())  # type: ignore[arg-type,return-value]
    source.start({"fallback": {"cursor": "c0"}}, first_start=False)

    snap = source.snapshot(lambda _h: ReplayNeed())

    assert [{"cursor": "c0"}] == started
    assert {"cursor": "c1"} == snap["fallback"]  # type: ignore[index]
    assert "No such file" in source.fallback_reason


def test_unreadable_device_without_fallback_is_an_error(tmp_path: Path) -> None:
    source = KmsgSource(path=str(tmp_path / "nothing"))

    with pytest.raises(FileNotFoundError):
        source.start(None, first_start=True)


@pytest.mark.integration
def test_the_real_device_is_read_without_blocking() -> None:
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here (needs CAP_SYSLOG)")
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        pytest.skip(f"/dev/kmsg cannot be opened here: {exc.strerror}")
    os.close(fd)
    source = KmsgSource(max_records_per_poll=100_000)
    d = SourceDriver(lambda: source)
    d.start()

    d.poll()  # returns at EAGAIN: it would hang here if the device were read blocking

    assert d.delivered, "the kernel ring buffer is never empty after boot"
    seqs = [x.position for x in d.delivered]
    assert seqs == sorted(seqs)
    assert source.fds() == (source.fd,)
    d.restart()
    d.poll()
    assert [] == d.duplicates()
