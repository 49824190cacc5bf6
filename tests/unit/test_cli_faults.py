"""`sigwatch policy explain`, and `sigwatch faults list|clear` with no daemon running."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import structlog

from sigwatch.cli import main


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    """These commands configure structlog for the process (stderr is pytest's capture here):
    put the defaults back so later tests do not write to a closed capture."""
    yield
    structlog.reset_defaults()

XID79 = "{t} node7 kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=python3, GPU has fallen off the bus."
XID48 = "{t} node7 kernel: NVRM: Xid (PCI:0000:2b:00): 48, pid=1, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
OOM = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _stamp(t: float) -> str:
    return time.strftime("%b %e %H:%M:%S", time.localtime(t))


def _config(tmp_path: Path, body: str = "") -> Path:
    config = tmp_path / "sigwatch.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nlisten = "127.0.0.1:0"\n'
                      f'node = "gpu-node-7"\n{body}')
    return config


class TestPolicyExplain:
    def test_each_decision_is_printed_and_a_drain_names_its_command(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Xid 79 opens a fault then folds; three Xid 48 within a day (config) open one on
        the third; the OOM is the user's; exit 1 because faults would open."""
        t0 = time.time() - 7200
        log = tmp_path / "kern.log"
        log.write_text("\n".join([
            XID79.format(t=_stamp(t0)), XID79.format(t=_stamp(t0 + 1)),
            XID48.format(t=_stamp(t0 + 10)), XID48.format(t=_stamp(t0 + 600)), OOM,
            XID48.format(t=_stamp(t0 + 1200))]) + "\n")
        marker = tmp_path / "slurm-was-called"
        spy = tmp_path / "spy"
        spy.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\n")
        spy.chmod(0o755)
        config = _config(tmp_path, '[policy]\nmode = "act"\n'
                         "[policy.signatures.nvidia_xid_48_double_bit_ecc]\n"
                         "count = 3\nwindow_seconds = 86400\n"
                         f'[slurm]\nscontrol = "{spy}"\nsinfo = "{spy}"\n')

        code = main(["policy", "explain", "--config", str(config), str(log)])

        out = capsys.readouterr().out.splitlines()
        assert 1 == code
        assert "policy mode: act" == out[0]
        decided = [(line.split("  ")[2].split(" (")[0], line.split("): ")[1].split(":")[0])
                   for line in out[1:-1] if not line.startswith("    ")]
        assert [("nvidia_xid_79_fallen_off_bus", "OPENED"),
                ("nvidia_xid_79_fallen_off_bus", "FOLDED"),
                ("nvidia_xid_48_double_bit_ecc", "COUNTING"),
                ("nvidia_xid_48_double_bit_ecc", "COUNTING"),
                ("cuda_out_of_memory", "NONE"),
                ("nvidia_xid_48_double_bit_ecc", "OPENED")] == decided
        commands = [line for line in out if line.startswith("    would run: ")]
        assert 2 == len(commands)
        assert commands[0].startswith(
            '    would run: scontrol update NodeName=gpu-node-7 State=DRAIN Reason="sigwatch: '
            "nvidia_xid_79_fallen_off_bus: ")
        assert out[-1].startswith("2 fault(s) would open: f")
        assert not (tmp_path / "state").exists()  # explain writes nothing
        assert not marker.exists()  # and never asks Slurm for anything

    def test_nothing_to_do_exits_0(self, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
        log = tmp_path / "train.log"
        log.write_text(OOM + "\n")

        assert 0 == main(["policy", "explain", "--config", str(_config(tmp_path)), str(log)])
        out = capsys.readouterr().out
        assert "policy mode: observe (nothing would be done" in out
        assert "user-owned: a job's own failure never drains a node" in out
        assert out.endswith("0 fault(s) would open\n")


class TestFaultsWithoutDaemon:
    def test_list_then_clear_here_when_no_daemon_runs(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The engine of the config is built in the command (it takes the daemon's lock)."""
        from sigwatch.app import build_faults
        from sigwatch.clock import SystemClock
        from sigwatch.config import load_config
        from sigwatch.model import Detection, Remediation, Severity

        config = _config(tmp_path)
        engine = build_faults(load_config(config), clock=SystemClock(), metrics=None,
                              patterns=None)
        engine.emit(Detection(
            signature="nvidia_xid_79_fallen_off_bus", title="Xid 79", owner="node",
            severity=Severity.CRITICAL, status="stable", source="kernel", path="k", line=1,
            stream_key="s", offset=0, text="NVRM: Xid 79", time=time.time(),
            remediation=Remediation(summary="reboot")))
        engine.close()
        fid = engine.faults()[0].id

        assert 0 == main(["faults", "list", "--config", str(config)])
        listed = capsys.readouterr().out
        assert "policy mode: observe" in listed and f"{fid}  firing" in listed

        assert 0 == main(["faults", "clear", fid, "--config", str(config), "--by", "dave"])
        assert (f"fault {fid} cleared: observed (observe mode: would resume the node if it "
                "were still drained with a sigwatch reason) (no daemon running: cleared here)"
                ) in capsys.readouterr().out

        assert 0 == main(["faults", "list", "--config", str(config)])
        assert "no open fault on this node (1 cleared: --all lists them)\n" == \
            capsys.readouterr().out
        assert 0 == main(["faults", "list", "--all", "--format", "json", "--config",
                          str(config)])
        [doc] = json.loads(capsys.readouterr().out)["faults"]
        assert "manual:dave" == doc["cleared_by"]
        assert 1 == main(["faults", "clear", fid, "--config", str(config)])
