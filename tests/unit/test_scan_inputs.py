"""``sigwatch scan`` reads compressed rotations, folders and stdin; never a silent "clean"."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sigwatch.cli import main

FINE = """
id = "fine_x"
title = "Fine"
severity = "error"
[match]
regex = 'real (?P<what>error)'
"""
INCIDENT = b"step 9\nreal error here\n"


class TestCompressedInputs:
    @pytest.mark.parametrize(("name", "pack"), [
        ("app.log.1.gz", gzip.compress), ("app.log.2.bz2", bz2.compress),
        ("app.log.3.xz", lzma.compress), ("rotated-without-extension", gzip.compress)],
        ids=["gzip", "bzip2", "xz", "gzip-by-magic"])
    def test_a_compressed_rotation_is_decompressed_and_matched(
            self, tmp_path: Path, write_pattern: Callable, capsys: pytest.CaptureFixture[str],
            name: str, pack: Callable[[bytes], bytes]) -> None:
        root = write_pattern("fine_x", FINE)
        log = tmp_path / name
        log.write_bytes(pack(INCIDENT))

        status = main(["scan", "--patterns", str(root), str(log)])

        assert 1 == status
        assert "fine_x" in capsys.readouterr().out

    def test_zstd_is_a_clear_error_not_a_clean_result(
            self, tmp_path: Path, write_pattern: Callable,
            capsys: pytest.CaptureFixture[str]) -> None:
        root = write_pattern("fine_x", FINE)
        log = tmp_path / "app.log.1.zst"
        log.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)

        status = main(["scan", "--patterns", str(root), str(log)])

        err = capsys.readouterr().err
        assert 2 == status
        assert "zstd" in err
        assert "app.log.1.zst: cannot read" in err

    def test_a_truncated_gzip_reports_what_it_read_and_fails(
            self, tmp_path: Path, write_pattern: Callable,
            capsys: pytest.CaptureFixture[str]) -> None:
        root = write_pattern("fine_x", FINE)
        log = tmp_path / "app.log.1.gz"
        noise = b"".join(os.urandom(24).hex().encode() + b"\n" for _ in range(20_000))
        log.write_bytes(gzip.compress(INCIDENT + noise)[:-2000])

        status = main(["scan", "--patterns", str(root), str(log)])

        captured = capsys.readouterr()
        assert 2 == status
        assert "fine_x" in captured.out
        assert "cannot read" in captured.err


class TestFolders:
    def test_a_folder_is_read_recursively(self, tmp_path: Path, write_pattern: Callable,
                                          capsys: pytest.CaptureFixture[str]) -> None:
        root = write_pattern("fine_x", FINE)
        logs = tmp_path / "logs"
        (logs / "job1" / "deep").mkdir(parents=True)
        (logs / "job1" / "deep" / "rank0.log").write_bytes(INCIDENT)
        (logs / "job2.log.1.gz").write_bytes(gzip.compress(INCIDENT))
        (logs / "clean.log").write_bytes(b"all good\n")

        status = main(["scan", "--patterns", str(root), "--format", "json", str(logs)])

        out = capsys.readouterr().out
        assert 1 == status
        assert 2 == out.count('"fine_x"')
        assert "rank0.log" in out
        assert "job2.log.1.gz" in out

    @pytest.mark.skipif(os.geteuid() == 0 and not os.environ.get("SIGWATCH_DROP_ROOT"),
                        reason="root reads any file; permission errors need a normal user")
    def test_an_unreadable_entry_is_named_and_the_rest_is_read(
            self, tmp_path: Path, write_pattern: Callable,
            capsys: pytest.CaptureFixture[str]) -> None:
        root = write_pattern("fine_x", FINE)
        logs = tmp_path / "logs"
        logs.mkdir()
        (logs / "a.log").write_bytes(INCIDENT)
        secret = logs / "secret.log"
        secret.write_bytes(INCIDENT)
        secret.chmod(0)

        status = main(["scan", "--patterns", str(root), str(logs)])

        captured = capsys.readouterr()
        assert 2 == status
        assert "secret.log: cannot read" in captured.err
        assert "fine_x" in captured.out

    def test_a_dangling_link_inside_a_folder_is_named_and_the_rest_is_read(
            self, tmp_path: Path, write_pattern: Callable,
            capsys: pytest.CaptureFixture[str]) -> None:
        """What cannot be read is one clear line; the result is not "clean" (exit 2)."""
        root = write_pattern("fine_x", FINE)
        logs = tmp_path / "logs"
        logs.mkdir()
        (logs / "a.log").write_bytes(INCIDENT)
        (logs / "gone.log").symlink_to(tmp_path / "deleted.log")

        status = main(["scan", "--patterns", str(root), str(logs)])

        captured = capsys.readouterr()
        assert 2 == status
        assert "gone.log: cannot read: No such file or directory" in captured.err
        assert "fine_x" in captured.out

    def test_a_symlink_loop_does_not_trap_the_scan(
            self, tmp_path: Path, write_pattern: Callable,
            capsys: pytest.CaptureFixture[str]) -> None:
        root = write_pattern("fine_x", FINE)
        logs = tmp_path / "logs"
        logs.mkdir()
        (logs / "a.log").write_bytes(INCIDENT)
        (logs / "loop").symlink_to(logs)

        status = main(["scan", "--patterns", str(root), "--format", "json", str(logs)])

        assert 1 == status
        assert 1 == capsys.readouterr().out.count('"fine_x"')

    def test_a_named_pipe_inside_a_folder_is_skipped_not_waited_on(
            self, tmp_path: Path, write_pattern: Callable,
            capsys: pytest.CaptureFixture[str]) -> None:
        root = write_pattern("fine_x", FINE)
        logs = tmp_path / "logs"
        logs.mkdir()
        os.mkfifo(logs / "job.fifo")
        (logs / "a.log").write_bytes(INCIDENT)

        status = main(["scan", "--patterns", str(root), str(logs)])

        captured = capsys.readouterr()
        assert 1 == status
        assert "job.fifo: skipped" in captured.err


def test_stdin_gzip_is_read_too(write_pattern: Callable, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """`-` keeps reading stdin (plain; a compressed stdin is piped through zcat by users)."""
    root = write_pattern("fine_x", FINE)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(INCIDENT)))

    assert 1 == main(["scan", "--patterns", str(root), "-"])
    assert "fine_x" in capsys.readouterr().out
