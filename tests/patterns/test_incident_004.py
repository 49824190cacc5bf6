"""Incident 004 for real: no error line, only a step time that triples on MI300/ROCm 6.3.0."""

from __future__ import annotations

import json
from pathlib import Path

from sigwatch.cli import main

LOG = Path(__file__).resolve().parents[1] / "corpus" / "incidents" / "004_mi300_miopen_slow.log"


def _scan(capsys, *args: str) -> list[dict[str, object]]:
    main(["scan", "--format", "json", *args, str(LOG)])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_slowdown_is_detected_as_incident_004_with_its_fix(capsys) -> None:
    found = _scan(capsys)  # the detectors run by default, as in the daemon

    regression = [d for d in found if d["signature"] == "step_time_regression"]
    assert 1 == len(regression)
    assert "error" == regression[0]["severity"]
    assert "004" in str(regression[0]["title"])
    fix = json.dumps(regression[0]["remediation"])
    assert "MIOPEN_FIND_MODE=3" in fix and "MIOPEN_FIND_ENFORCE=3" in fix and "6.3.1" in fix
    facts = regression[0]["facts"]
    assert isinstance(facts, dict)
    assert float(facts["ratio"]) > 2.5


def test_the_platform_note_is_said_once_per_stream(capsys) -> None:
    found = _scan(capsys, "--detectors")

    notes = [d for d in found if d["signature"] == "rocm_mi300_miopen_platform"]
    assert 1 == len(notes)
    assert "info" == notes[0]["severity"]


def test_the_old_detectors_flag_is_accepted_and_changes_nothing(capsys) -> None:
    def untimed(found: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{k: v for k, v in d.items() if k != "time"} for d in found]

    assert untimed(_scan(capsys)) == untimed(_scan(capsys, "--detectors"))


def test_without_detectors_only_the_platform_note_is_reported(capsys) -> None:
    found = _scan(capsys, "--no-detectors")

    assert {"rocm_mi300_miopen_platform"} == {d["signature"] for d in found}
