"""The five documented incidents: each has a signature carrying its fix, and is caught in a log."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from sigwatch.cli import main

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "incidents"

# The fix each incident's remediation must carry (INCIDENTS.md, "what on-call should be told").
FIXES = {
    "000": ["OverrideThreadArbitrationPolicy=2", "NEOReadDebugKeys=1", "3.7.0"],
    "001": ["XDG_CACHE_HOME", "TORCH_HOME", "NFS"],
    "002": ["9.8.0", "peer access"],
    "003": ["PyTorch/XLA", "retr"],
    "004": ["MIOPEN_FIND_MODE=3", "MIOPEN_FIND_ENFORCE=3", "6.3.1"],
}


def _remediation_text(sig) -> str:
    rem = sig.remediation
    return " ".join([rem.summary, *rem.steps])


@pytest.mark.parametrize("incident", sorted(FIXES))
def test_incident_has_a_signature_with_its_fix(library, incident: str) -> None:
    """Every incident id is covered by a signature whose remediation names the known fix."""
    covering = [s for s in library.signatures if incident in s.incidents]

    assert covering, f"no signature lists incidents = [{incident!r}]"
    text = " ".join(_remediation_text(s) for s in covering)
    missing = [fix for fix in FIXES[incident] if fix not in text]
    assert [] == missing


def _cases() -> list[Path]:
    return sorted(CORPUS.glob("*.log"))


@pytest.mark.parametrize("log", _cases(), ids=lambda p: p.stem)
def test_incident_log_is_detected_with_its_fix(log: Path, capsys) -> None:
    """`sigwatch scan --format json` reports the incident's signature with the fix attached."""
    expected = tomllib.loads(log.with_suffix(".expected.toml").read_text())["signatures"]

    status = main(["scan", "--format", "json", str(log)])

    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert 1 == status
    by_sig = {d["signature"]: d for d in found}
    assert [] == [sig for sig in expected if sig not in by_sig]
    for sig in expected:
        assert by_sig[sig]["remediation"]["summary"]


def test_every_incident_has_a_log() -> None:
    """The corpus holds one realistic log per incident."""
    assert sorted(FIXES) == sorted(p.name[:3] for p in _cases())
