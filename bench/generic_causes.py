#!/usr/bin/env python3
"""Keep the generic detections' ``[collateral] caused_by`` lists complete.

Generic signatures (a launcher's exit summary, a kernel ``*ERROR*`` line, a vendor's error-name
family) fire on failures whatever their cause. (Tracebacks, signals and glog E/F lines are read by
the generic layer, ``daemon/sigwatch/detectors/generic``, which the root-cause correlator ranks
below every signature without a list.) When a specific signature detected the
same incident on the same stream, it must become their root cause, so every generic signature
names every specific one (warning and above) in ``caused_by``. This script rewrites those
lists; ``tests/patterns/test_generic_detections.py`` fails when they are stale.

    .venv/bin/python bench/generic_causes.py          # report what is missing
    .venv/bin/python bench/generic_causes.py --write  # rewrite the lists
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

__all__ = ["GENERIC", "expected_causes", "main", "stale"]

REPO = Path(__file__).resolve().parent.parent
PATTERNS = REPO / "patterns"

GENERIC = frozenset({
    "cuda_driver_error_name",
    "cuda_runtime_error_name",
    "hip_error_name",
    "hsa_status_error",
    "level_zero_error_name",
    "xla_runtime_error_status",
    "deepspeed_launcher_subprocess_failed",
    "horovod_shut_down",
    "kernel_gpu_driver_error_line",
    "mpi_process_exited_on_signal",
    "mpich_bad_termination",
    "slurm_job_cancelled",
    "srun_task_failed",
    "torchelastic_root_cause_summary",
    "vllm_engine_dead",
    "sglang_scheduler_exception",
})
"""Signatures that name a failure without its cause; they rank below any specific one."""

CAUSED_BY_RE = re.compile(r"^caused_by = \[.*?\]\n", re.S | re.M)


def _library(root: Path = PATTERNS) -> dict[str, tuple[Path, dict[str, object]]]:
    out: dict[str, tuple[Path, dict[str, object]]] = {}
    for path in sorted(root.glob("*/*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        out[str(data["id"])] = (path, data)
    return out


def expected_causes(library: dict[str, tuple[Path, dict[str, object]]]) -> list[str]:
    """Every specific signature at warning or above, sorted."""
    return sorted(sid for sid, (_p, data) in library.items()
                  if sid not in GENERIC and data["severity"] != "info")


def stale(root: Path = PATTERNS) -> dict[str, list[str]]:
    """generic id -> specific ids missing from (or wrongly in) its caused_by."""
    library = _library(root)
    want = expected_causes(library)
    out: dict[str, list[str]] = {}
    for sid in sorted(GENERIC):
        if sid not in library:
            out[sid] = ["<signature file missing>"]
            continue
        collateral = library[sid][1].get("collateral")
        have = sorted(collateral.get("caused_by", [])) if isinstance(collateral, dict) else []
        if have != want:
            out[sid] = sorted(set(want) ^ set(have))
    return out


def _rewrite(path: Path, causes: list[str]) -> None:
    text = path.read_text(encoding="utf-8")
    block = "caused_by = [\n" + "".join(f"  '{c}',\n" for c in causes) + "]\n"
    new, count = CAUSED_BY_RE.subn(block, text, count=1)
    if count != 1:
        raise SystemExit(f"{path}: no caused_by list to rewrite")
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="Rewrite the caused_by lists.")
    args = parser.parse_args(argv)
    problems = stale()
    if args.write:
        library = _library()
        causes = expected_causes(library)
        for sid in problems:
            _rewrite(library[sid][0], causes)
        print(f"rewrote {len(problems)} generic signature(s)")
        return 0
    for sid, diff in problems.items():
        print(f"{sid}: caused_by differs in {len(diff)} id(s): {', '.join(diff[:8])}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
