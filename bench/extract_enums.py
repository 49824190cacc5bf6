#!/usr/bin/env python3
"""Extract error enumerations from upstream sources into ``patterns/_enums/*.json``.

Run once per upstream update, with a local git checkout of each project (``--mirror DIR`` holds
``owner+name/repo`` bare repositories, e.g. from the research tool's snapshots). Only names,
numeric values and message texts are kept, with the source URL and commit; no code is copied.
``bench/coverage.py`` turns the data files into ``patterns/COVERAGE.md``.

    python3 bench/extract_enums.py --mirror DIR
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SOURCES", "main"]

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "patterns" / "_enums"


@dataclass(frozen=True)
class Source:
    """One upstream file and how to read its enumeration."""

    family: str
    title: str
    repo: str
    path: str
    entry: str  # regex with groups name, value
    messages_path: str = ""
    message: str = ""  # regex with groups name, message (applied to messages_path)


SOURCES = (
    Source("cuda_runtime", "CUDA runtime API (cudaError_t)", "SciNim/nimcuda",
           "include/cuda12_5/driver_types.h",
           r"^\s*(?P<name>cuda(?:Success|Error[A-Za-z0-9]+))\s*=\s*(?P<value>\d+)\s*,?\s*$"),
    Source("cuda_driver", "CUDA driver API (CUresult)", "SciNim/nimcuda",
           "include/cuda12_5/cuda.h",
           r"^\s*(?P<name>CUDA_(?:SUCCESS|ERROR_[A-Z0-9_]+))\s*=\s*(?P<value>\d+)\s*,?\s*$"),
    Source("nccl", "NCCL (ncclResult_t)", "NVIDIA/nccl", "src/nccl.h.in",
           r"(?P<name>nccl(?:Success|[A-Z][A-Za-z]+Error|InvalidArgument|InvalidUsage|InProgress"
           r"|Timeout))\s*=\s*(?P<value>\d+)",
           "src/init.cc", r"case (?P<name>nccl\w+):\s*return \"(?P<message>[^\"]+)\";"),
    Source("hip", "HIP runtime (hipError_t)", "ROCm/HIP", "include/hip/hip_runtime_api.h",
           r"^\s*(?P<name>hip(?:Success|Error[A-Za-z0-9]+))\s*=\s*(?P<value>\d+)\s*,"),
    Source("hsa", "ROCm HSA runtime (hsa_status_t)", "ROCm/ROCR-Runtime",
           "runtime/hsa-runtime/inc/hsa.h",
           r"^\s*(?P<name>HSA_STATUS_(?:SUCCESS|INFO_[A-Z_]+|ERROR(?:_[A-Z0-9_]+)?))\s*=\s*"
           r"(?P<value>0x[0-9A-Fa-f]+|\d+)\s*,?",
           "runtime/hsa-runtime/core/runtime/hsa.cpp",
           r"case (?P<name>HSA_STATUS_\w+):\s*\*status_string =\s*\"[A-Z_]+: (?P<message>[^\"]+)\""),
    Source("level_zero", "oneAPI Level Zero (ze_result_t)", "oneapi-src/level-zero",
           "include/ze_api.h",
           r"^\s*(?P<name>ZE_RESULT_[A-Z0-9_]+)\s*=\s*(?P<value>0x[0-9a-fA-F]+|\d+),\s*///< "
           r"(?P<message>.+?)\s*$"),
    Source("absl", "Abseil/XLA status codes (absl::StatusCode)", "abseil/abseil-cpp",
           "absl/status/status.h", r"^\s*k(?P<name>[A-Z][A-Za-z]+) = (?P<value>\d+),\s*$"),
)


def _git(mirror: Path, repo: str, *args: str) -> str:
    git_dir = mirror / repo.replace("/", "+") / "repo"
    return subprocess.run(["git", "-C", str(git_dir), *args], check=True, capture_output=True,
                          text=True).stdout


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def extract(source: Source, mirror: Path) -> dict[str, object]:
    commit = _git(mirror, source.repo, "rev-parse", "HEAD").strip()
    text = _git(mirror, source.repo, "show", f"HEAD:{source.path}")
    if source.family == "absl":  # only the StatusCode enumeration
        start = text.index("enum class StatusCode")
        text = text[start:text.index("};", start)]
    entries: dict[str, dict[str, str]] = {}
    for m in re.finditer(source.entry, text, re.M):
        name = m["name"] if source.family != "absl" else _snake(m["name"])
        if name in entries:
            continue
        entry = {"name": name, "value": m["value"]}
        if "message" in m.groupdict() and m["message"]:
            entry["message"] = m["message"]
        entries[name] = entry
    if source.messages_path:
        body = _git(mirror, source.repo, "show", f"HEAD:{source.messages_path}")
        body = re.sub(r"\"\s*\n\s*\"", "", body)  # join C string continuations
        for m in re.finditer(source.message, body):
            if m["name"] in entries and "message" not in entries[m["name"]]:
                entries[m["name"]]["message"] = m["message"]
    return {
        "family": source.family,
        "title": source.title,
        "repository": f"https://github.com/{source.repo}",
        "path": source.path,
        "messages_path": source.messages_path,
        "commit": commit,
        "source": f"https://github.com/{source.repo}/blob/{commit}/{source.path}",
        "entries": list(entries.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirror", type=Path, required=True)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for source in SOURCES:
        data = extract(source, args.mirror)
        (OUT / f"{source.family}.json").write_text(
            json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{source.family}: {len(data['entries'])} names from {data['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
