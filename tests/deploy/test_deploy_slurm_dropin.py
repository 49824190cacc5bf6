"""The systemd drop-in for Slurm nodes: the unit with it verifies cleanly and runs as a user
Slurm lets drain (not a dynamic user), with the unit's hardening kept."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.debian import require

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "sigwatch.service"
DROPIN = REPO / "systemd" / "sigwatch.service.d" / "slurm.conf"


def _settings(text: str) -> dict[str, str]:
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_the_unit_with_the_slurm_drop_in_verifies_without_a_warning(tmp_path: Path) -> None:
    entry = Path(sys.executable).parent / "sigwatch"
    (tmp_path / "sigwatch.service").write_text(
        UNIT.read_text().replace("/opt/sigwatch/bin/sigwatch", str(entry)))
    (tmp_path / "sigwatch.service.d").mkdir()
    shutil.copy(DROPIN, tmp_path / "sigwatch.service.d" / "slurm.conf")
    broken = tmp_path / "planted" / "sigwatch.service.d"
    broken.mkdir(parents=True)
    shutil.copy(tmp_path / "sigwatch.service", tmp_path / "planted" / "sigwatch.service")
    (broken / "slurm.conf").write_text(DROPIN.read_text() + "Usr=slurm\n")

    good = subprocess.run([require("systemd-analyze"), "verify",
                           str(tmp_path / "sigwatch.service")], capture_output=True, text=True,
                          check=False, timeout=120)
    bad = subprocess.run([require("systemd-analyze"), "verify",
                          str(tmp_path / "planted" / "sigwatch.service")], capture_output=True,
                         text=True, check=False, timeout=120)

    assert (0, "") == (good.returncode, good.stderr.strip())
    assert "Unknown key 'Usr'" in bad.stderr  # the drop-in is read: a typo in it shows


def test_the_drop_in_only_changes_who_runs_the_daemon() -> None:
    dropin = _settings(DROPIN.read_text())

    assert {"DynamicUser": "no", "User": "slurm", "Group": "slurm"} == dropin
    unit = _settings(UNIT.read_text())
    assert "strict" == unit["ProtectSystem"] and "yes" == unit["NoNewPrivileges"]
