"""LineFramer and normalize: bytes to the lines patterns see."""

from __future__ import annotations

from sigwatch.framing.lines import LineFramer, find_long_lines
from sigwatch.framing.normalize import normalize


def _lines(segments: list) -> list[bytes]:
    return [line for seg in segments for line in seg.data.split(b"\n")[:-1]]


class TestLineFramer:
    def test_partial_last_line_waits_for_its_newline(self) -> None:
        """A line without newline is held back, then emitted once, whole."""
        framer = LineFramer()

        first = framer.feed(b"one\ntw")
        second = framer.feed(b"o\n")

        assert [b"one"] == _lines(first)
        assert [b"two"] == _lines(second)
        assert 8 == framer.committed_offset

    def test_committed_offset_excludes_the_pending_partial_line(self) -> None:
        """A restart resumes at the start of the unfinished line, never inside it."""
        framer = LineFramer(offset=100)

        framer.feed(b"done\nhalf")

        assert 105 == framer.committed_offset
        assert 4 == framer.pending_bytes

    def test_segment_offsets_are_file_offsets(self) -> None:
        """Every segment says where its first byte sits in the stream."""
        framer = LineFramer(offset=10)

        segs = framer.feed(b"a\nbb\n")

        assert 10 == segs[0].offset
        assert 15 == segs[0].next_offset

    def test_long_line_inside_a_read_is_cut_and_flagged(self) -> None:
        """A line over the limit is cut to the limit; its neighbours are intact."""
        framer = LineFramer(max_line_bytes=300)
        long_line = b"x" * 1000

        segs = framer.feed(b"before\n" + long_line + b"\nafter\n")

        assert [b"before", b"x" * 300, b"after"] == _lines(segs)
        assert [False, True, False] == [s.truncated for s in segs]
        assert segs[2].offset == 7 + 1001

    def test_long_partial_line_uses_bounded_memory(self) -> None:
        """Megabytes without a newline are not buffered: only the limit is kept."""
        framer = LineFramer(max_line_bytes=1024)

        for _ in range(50):
            framer.feed(b"y" * 100_000)
        segs = framer.feed(b"\nnext\n")

        assert 1024 >= len(framer._pending)  # noqa: SLF001 - the bound is the point
        assert [b"y" * 1024, b"next"] == _lines(segs)
        assert segs[0].truncated
        assert 5_000_001 == segs[1].offset

    def test_invalid_utf8_split_across_reads_stays_in_one_line(self) -> None:
        """Framing works on bytes, so a multi-byte character split by a read is not broken."""
        framer = LineFramer()
        text = "loss 0.5 🚀 ok\n".encode()

        segs = framer.feed(text[:11]) + framer.feed(text[11:])

        assert ["loss 0.5 🚀 ok"] == [line.decode() for line in _lines(segs)]

    def test_finish_emits_an_unterminated_last_line(self) -> None:
        """At the end of a one-shot input, a last line without newline is still read."""
        framer = LineFramer()
        framer.feed(b"a\nlast")

        segs = framer.finish()

        assert [b"last"] == _lines(segs)
        assert segs[0].unterminated

    def test_find_long_lines_finds_each_over_the_limit(self) -> None:
        """The jump search reports exactly the lines longer than the limit."""
        buf = b"a\n" + b"b" * 50 + b"\n" + b"c" * 10 + b"\n" + b"d" * 51 + b"\n"

        assert [(2, 52), (64, 115)] == find_long_lines(buf, 49)


class TestNormalize:
    def test_ansi_colours_are_removed(self) -> None:
        """Colour codes never reach a pattern."""
        assert [(None, "ERROR CUDA error")] == normalize("\x1b[1;31mERROR\x1b[0m CUDA error")

    def test_ansi_colours_escaped_by_rsyslog_are_removed(self) -> None:
        """rsyslog writes ESC as ``#033``: the colour codes go, a literal ``#033`` stays."""
        assert [(None, "(raylet) [2023-09-25] worker died")] == normalize(
            "#033[2m#033[33m(raylet)#033[0m [2023-09-25] worker died")
        assert [(None, "issue #033 [wontfix]")] == normalize("issue #033 [wontfix]")

    def test_carriage_return_rewrite_splits_the_line(self) -> None:
        """An error glued to a tqdm bar is seen as its own line."""
        parts = normalize(" 45%|████▌ | 450/1000\rRuntimeError: CUDA error: boom")

        assert "RuntimeError: CUDA error: boom" == parts[-1][1]
        assert 2 == len(parts)

    def test_crlf_leaves_no_empty_part(self) -> None:
        """Windows line endings give one line, without the \\r."""
        assert [(None, "hello")] == normalize("hello\r")

    def test_rank_prefixes_are_parsed_and_removed(self) -> None:
        """torchrun, tee and srun prefixes become the rank."""
        assert [("3", "x")] == normalize("[rank3]: x")
        assert [("0", "y")] == normalize("[default0]:y")
        assert [("12", "z")] == normalize(" 12: z")

    def test_rank_is_inherited_by_carriage_return_parts(self) -> None:
        """Progress rewrites after a prefixed part keep its rank."""
        assert [("1", "a"), ("1", "b")] == normalize("[rank1]: a\rb")

    def test_nul_bytes_are_dropped(self) -> None:
        """NUL holes from a truncated file do not split keywords."""
        assert [(None, "NCCL WARN")] == normalize("\x00\x00NCCL\x00 WARN")

    def test_timestamps_are_not_mistaken_for_ranks(self) -> None:
        """A time of day is not an srun label."""
        assert [(None, "12:30:45 start")] == normalize("12:30:45 start")
