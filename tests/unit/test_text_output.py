"""What a person reads at 3 a.m.: ``scan`` text output and the console sink."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from sigwatch.cli import main
from sigwatch.model import Detection, Remediation, RootCause, Severity
from sigwatch.sinks.console import Style, format_detection, use_colour

REPO = Path(__file__).resolve().parents[2]
ECC = "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
FANOUT = ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing "
          "signal SIGTERM\n")


def _scan(tmp_path: Path, text: str, *args: str, capsys) -> tuple[int, str]:
    log = tmp_path / "job.log"
    log.write_text(text)
    status = main(["scan", *args, str(log)])
    return status, capsys.readouterr().out


def _detection(**kw: object) -> Detection:
    base = dict(signature="x_sig", title="X", severity=Severity.ERROR, status="stable",
                source="s", path="/logs/a.log", stream_key="k", line=7, offset=1234,
                text="boom", time=0.0, remediation=Remediation("do this", ("one", "two"),
                                                               "https://runbook"))
    base.update(kw)
    return Detection(**base)  # type: ignore[arg-type]


def test_the_fix_is_printed_with_its_numbered_steps_and_runbook() -> None:
    text = format_detection(_detection())

    assert "fix: do this" in text
    assert "  1. one" in text and "  2. two" in text
    assert "runbook: https://runbook" in text


def test_byte_offsets_are_left_to_the_json() -> None:
    text = format_detection(_detection(offset=987654))

    assert "987654" not in text
    assert "/logs/a.log:7" in text


def test_a_long_line_is_shortened_in_text_and_whole_in_json(tmp_path: Path, capsys) -> None:
    line = "RuntimeError: CUDA error: an illegal memory access was encountered " + "x" * 900
    _status, out = _scan(tmp_path, line + "\n", capsys=capsys)
    assert line not in out
    assert "more characters in the JSON" in out

    _status, out = _scan(tmp_path, line + "\n", "--format", "json", capsys=capsys)
    assert line == json.loads(out.splitlines()[0])["text"]


def test_fallout_is_folded_under_its_root_cause_not_repeated(tmp_path: Path, capsys) -> None:
    status, out = _scan(tmp_path, ECC + FANOUT + FANOUT, "--color", "never", capsys=capsys)

    assert 1 == status
    assert 1 == out.count("fix:")  # the root cause carries the fix, once
    assert "also " in out and "torchelastic_sigterm_fanout" in out
    assert "shown as fallout of their root cause" in out


def test_a_clean_scan_says_so(tmp_path: Path, capsys) -> None:
    status, out = _scan(tmp_path, "INFO all good\n", capsys=capsys)

    assert (0, "no detections in 1 input\n") == (status, out)


def test_the_summary_counts_detections_by_severity(tmp_path: Path, capsys) -> None:
    _status, out = _scan(tmp_path, ECC, "--color", "never", capsys=capsys)

    assert re.fullmatch(r"1 detection \(1 (critical|error)\) in 1 input", out.splitlines()[-1])


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    class Pipe:
        def isatty(self) -> bool:
            return False

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Tty())  # type: ignore[arg-type]
    assert not use_colour(Pipe())  # type: ignore[arg-type]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())  # type: ignore[arg-type]
    assert "\x1b[" in format_detection(_detection(), style=Style(colour=True))
    assert "\x1b[" not in format_detection(_detection(), style=Style(colour=False))


def test_fallout_in_the_daemon_console_names_its_root_cause_in_one_line() -> None:
    d = _detection(root_cause=RootCause("cuda_uncorrectable_ecc", "ECC", "ecc line", "/a", 1))

    text = format_detection(d)

    assert "fallout of cuda_uncorrectable_ecc: ecc line" in text
    assert "fix:" not in text


def test_a_lineless_detection_says_what_it_is_about_and_its_figures() -> None:
    d = _detection(line=None, offset=None, text=None, about="no progress for 900 s",
                   facts=(("usual_interval_seconds", "2.0"),))

    text = format_detection(d)

    assert "no progress for 900 s" in text
    assert "usual_interval_seconds: 2.0" in text


def test_a_traceback_detection_quotes_its_frames(tmp_path: Path, capsys) -> None:
    tb = ('Traceback (most recent call last):\n  File "train.py", line 10, in <module>\n'
          '    main()\n  File "train.py", line 5, in main\n    raise ValueError("bad")\n'
          'ValueError: bad\n')
    _status, out = _scan(tmp_path, tb, "--format", "json", capsys=capsys)
    found = [json.loads(line) for line in out.splitlines()]

    uncaught = [d for d in found if d["signature"] == "generic_traceback"]
    assert 1 == len(uncaught)
    assert '  File "train.py", line 5, in main' in uncaught[0]["context"]
    assert "ValueError: bad" == uncaught[0]["text"]


def test_every_signature_quotes_some_context_by_default(tmp_path: Path, capsys) -> None:
    text = "step 1 ok\nstep 2 ok\n" + "RuntimeError: CUDA error: an illegal memory access was " \
        "encountered\n"
    _status, out = _scan(tmp_path, text, "--format", "json", capsys=capsys)

    assert ["step 1 ok", "step 2 ok"] == json.loads(out.splitlines()[0])["context"]


def test_patterns_list_as_json_has_one_object_per_signature(library, capsys) -> None:
    assert 0 == main(["patterns", "list", "--format", "json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert len(library) == len(rows)
    assert {"id", "severity", "remediation"} <= set(rows[0])


def test_patterns_list_into_a_closed_pipe_ends_quietly() -> None:
    # JSON is larger than a pipe buffer, so the writer is still writing when head exits.
    cmd = (f"{sys.executable} -m sigwatch patterns list --format json | head -1; "
           "echo status=${PIPESTATUS[0]} >&2")
    result = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60,
                            check=False)

    assert "Traceback" not in result.stderr
    assert "status=141" in result.stderr
    assert 1 == len(result.stdout.splitlines())


def test_add_patterns_keeps_the_library_and_adds_site_signatures(
        tmp_path: Path, write_pattern, capsys) -> None:
    site = write_pattern("site_widget_failed", """
        id = "site_widget_failed"
        title = "Widget Failed"
        severity = "error"
        [match]
        regex = 'WIDGET FAILED'
    """)
    log = tmp_path / "a.log"
    log.write_text("WIDGET FAILED\nRuntimeError: CUDA error: an illegal memory access was "
                   "encountered\n")

    main(["scan", "--format", "json", "--add-patterns", str(site), str(log)])
    found = {json.loads(line)["signature"] for line in capsys.readouterr().out.splitlines()}

    assert {"site_widget_failed", "cuda_illegal_memory_access"} <= found


def test_a_count_update_of_a_folded_incident_is_one_line() -> None:
    """800,000 repeats are one block and a few one-line counts, not 800,000 blocks."""
    import dataclasses  # noqa: PLC0415

    from sigwatch.model import Detection, Remediation, Severity  # noqa: PLC0415
    from sigwatch.sinks.console import format_detection  # noqa: PLC0415

    first = Detection(
        signature="nvidia_xid_79_fallen_off_bus", title="GPU Has Fallen Off The Bus",
        severity=Severity.CRITICAL, status="stable", source="kernel", path="/dev/kmsg",
        stream_key="kmsg:boot", line=7, offset=7, text="NVRM: Xid (PCI:0000:8a:00): 79",
        time=1_700_000_000.0, remediation=Remediation(summary="Drain the node."),
        jobs=("4471203",))
    update = dataclasses.replace(first, line=800_006, offset=800_006, incident=first.event_id,
                                 occurrence=800_000, repeats=12_345)

    text = format_detection(update)

    assert 1 == len(text.splitlines())
    assert "seen 800,000 times (+12,345)" in text
    assert "(job 4471203)" in text
    assert "(job 4471203)" in format_detection(first)
