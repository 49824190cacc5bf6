"""The command line is a stable interface: exit codes, formats, one-line errors."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sigwatch import __version__
from sigwatch.cli import main

FINE = """
id = "fine_x"
title = "Fine"
severity = "error"
[match]
regex = 'real (?P<what>error)'
[remediation]
summary = "do the thing"
steps = ["one", "two"]
action = "restart_job"
"""


class TestScan:
    def test_no_detection_exits_zero(self, tmp_path: Path, write_pattern: Callable) -> None:
        """A clean file is exit 0."""
        root = write_pattern("fine_x", FINE)
        log = tmp_path / "a.log"
        log.write_text("all good\n")

        assert 0 == main(["scan", "--patterns", str(root), str(log)])

    def test_detection_exits_one_and_prints_json(
            self, tmp_path: Path, write_pattern: Callable, capsys) -> None:
        """A detection is exit 1; JSON carries line, offset, text and remediation."""
        root = write_pattern("fine_x", FINE)
        log = tmp_path / "a.log"
        log.write_text("ok\nreal error here\n")

        status = main(["scan", "--patterns", str(root), "--format", "json", str(log)])

        found = json.loads(capsys.readouterr().out)
        assert 1 == status
        assert {"signature": "fine_x", "severity": "error", "source": str(log),
                "path": str(log), "line": 2, "offset": 3, "text": "real error here"} == {
            k: found[k] for k in ("signature", "severity", "source", "path", "line", "offset",
                                  "text")}
        assert {"summary": "do the thing", "steps": ["one", "two"], "runbook": "",
                "action": "restart_job"} == found["remediation"]
        assert {"what": "error"} == found["captures"]
        assert {"context", "time", "event_id", "root_cause"} <= found.keys()

    def test_stdin_is_read_with_dash(self, write_pattern: Callable, monkeypatch,
                                     capsys) -> None:
        """`-` reads standard input."""
        root = write_pattern("fine_x", FINE)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"real error\n")))

        status = main(["scan", "--patterns", str(root), "-"])

        assert 1 == status
        assert "fine_x" in capsys.readouterr().out

    def test_unreadable_file_exits_two_naming_it(self, tmp_path: Path, capsys) -> None:
        """An input error names the file and the reason on one line."""
        status = main(["scan", str(tmp_path / "missing.log")])

        err = capsys.readouterr().err.strip()
        assert 2 == status
        assert 1 == len(err.splitlines())
        assert "missing.log: cannot read" in err

    def test_broken_pattern_exits_two_with_file_field_reason(
            self, tmp_path: Path, write_pattern: Callable, capsys) -> None:
        """e.g. `patterns/test/fine_x.toml: match.regex: missing ) at position 5`."""
        root = write_pattern("fine_x", FINE.replace("(?P<what>error)", "(?P<what>error"))
        log = tmp_path / "a.log"
        log.write_text("x\n")

        status = main(["scan", "--patterns", str(root), str(log)])

        err = capsys.readouterr().err.strip()
        assert 2 == status
        assert "fine_x.toml: match.regex: missing ) at position" in err

    def test_usage_error_exits_two(self) -> None:
        """argparse's usage errors keep the documented status."""
        with pytest.raises(SystemExit) as info:
            main(["scan", "--format", "xml", "x"])

        assert 2 == info.value.code

    def test_min_severity_filters(self, tmp_path: Path, write_pattern: Callable) -> None:
        """--min-severity hides detections below it (and the exit status follows)."""
        root = write_pattern("fine_x", FINE)
        log = tmp_path / "a.log"
        log.write_text("real error\n")

        assert 0 == main(["scan", "--patterns", str(root), "--min-severity", "critical",
                          str(log)])


class TestScanInputFormat:
    """A Kubernetes pod log (CRI) whose failure line was split over a P and an F record."""

    POD_LOG = (b"2024-11-20T10:02:11.000000001Z stderr P RuntimeError: CUDA error: an illegal "
               b"mem\n2024-11-20T10:02:11.000000002Z stderr F ory access was encountered\n")

    def _signatures(self, tmp_path: Path, capsys, *flags: str) -> list[tuple[str, str]]:  # noqa: ANN001
        log = tmp_path / "0.log"
        log.write_bytes(self.POD_LOG)
        main(["scan", "--format", "json", *flags, str(log)])
        found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        return [(d["signature"], d["text"]) for d in found]

    def test_auto_is_the_default_and_reads_the_whole_line(self, tmp_path: Path,
                                                          capsys) -> None:
        """The record prefix is gone and the partial line is joined: the right signature."""
        assert [("cuda_illegal_memory_access",
                 "RuntimeError: CUDA error: an illegal memory access was encountered")] == \
            self._signatures(tmp_path, capsys)

    def test_cri_forced_gives_the_same(self, tmp_path: Path, capsys) -> None:
        assert self._signatures(tmp_path, capsys) == self._signatures(
            tmp_path, capsys, "--input-format", "cri")

    def test_plain_forced_reads_the_records_as_text(self, tmp_path: Path, capsys) -> None:
        """What scan did before: the half line only matches the generic CUDA error."""
        found = self._signatures(tmp_path, capsys, "--input-format", "plain")

        assert "cuda_illegal_memory_access" not in [s for s, _ in found]
        assert all(text.startswith("2024-11-20T10:02:11") for _, text in found)


class TestOtherCommands:
    def test_version(self, capsys) -> None:
        """--version prints the package version."""
        with pytest.raises(SystemExit) as info:
            main(["--version"])

        assert 0 == info.value.code
        assert __version__ in capsys.readouterr().out

    def test_patterns_list_shows_every_signature(self, library, capsys) -> None:
        """`patterns list` lists the built-in library."""
        assert 0 == main(["patterns", "list"])

        out = capsys.readouterr().out
        assert len(library) == len(out.splitlines())

    def test_patterns_show_prints_the_file(self, capsys) -> None:
        """`patterns show ID` prints that signature's file."""
        assert 0 == main(["patterns", "show", "rocm_hsa_aperture_violation"])

        assert 'id = "rocm_hsa_aperture_violation"' in capsys.readouterr().out.replace("'", '"')

    def test_patterns_test_runs_every_example(self, capsys) -> None:
        """`patterns test` reports N passed, 0 failed on the library."""
        assert 0 == main(["patterns", "test"])

        assert capsys.readouterr().out.strip().endswith("passed, 0 failed")

    def test_check_config_accepts_a_valid_file(self, tmp_path: Path, capsys) -> None:
        """A valid config and its patterns are checked without starting anything."""
        path = tmp_path / "c.toml"
        path.write_text('[[sources]]\nname = "jobs"\npaths = ["/tmp/x/*.log"]\n')

        assert 0 == main(["check-config", str(path)])

    def test_check_config_rejects_unknown_key_in_one_line(self, tmp_path: Path,
                                                          capsys) -> None:
        """Exit 2, one line: file, field, reason."""
        path = tmp_path / "c.toml"
        path.write_text('lisen = "127.0.0.1:1"\n')

        status = main(["check-config", str(path)])

        assert 2 == status
        assert f"sigwatch: {path}: lisen: unknown key" == capsys.readouterr().err.strip()

    def test_catalogue_lists_every_signature(self, library, capsys) -> None:
        """The generated catalogue has one row per signature."""
        assert 0 == main(["patterns", "catalogue"])

        rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| `")]
        assert len(library) == len(rows)
