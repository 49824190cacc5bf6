#!/usr/bin/env python3
"""Generate ``patterns/COVERAGE.md``: which upstream error names the library catches.

The ground truth of wording is the emitting projects' own enumerations, extracted by
``bench/extract_enums.py`` into ``patterns/_enums/<family>.json`` (names, values, message texts,
source URL and commit). For every name this renders a line in the format the name reaches logs
in (see ``FAMILIES``), runs it through the real engine, and records which signature caught it.
Names the library leaves out on purpose are listed with the reason. A name that is neither
caught nor excluded is a gap, and the test fails on it.

    .venv/bin/python bench/coverage.py            # check that COVERAGE.md is current
    .venv/bin/python bench/coverage.py --write    # regenerate it
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "daemon"))

from sigwatch.clock import FakeClock  # noqa: E402
from sigwatch.model import Severity, StreamInfo  # noqa: E402
from sigwatch.patterns.compiled import PatternSet  # noqa: E402
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns  # noqa: E402
from sigwatch.pipeline import Engine, Pipeline  # noqa: E402
from sigwatch.scanning import scan_bytes  # noqa: E402
from sigwatch.sinks.base import CollectingSink  # noqa: E402

__all__ = ["ENUMS", "FAMILIES", "OUTPUT", "Row", "evaluate", "main", "render"]

ENUMS = REPO / "patterns" / "_enums"
OUTPUT = REPO / "patterns" / "COVERAGE.md"

Entry = dict[str, str]


@dataclass(frozen=True)
class Family:
    """How one family's names reach a log, and what the library leaves out on purpose."""

    title: str
    formats: tuple[str, ...]  # how the rendered lines look (documentation)
    render: Callable[[Entry], list[str]]
    excluded: dict[str, str] = field(default_factory=dict)


def _short(message: str) -> str:
    """NCCL before 2.12 printed the bare message, without the '(run with ...)' hint."""
    return message.split(" (run with")[0].split(" - please")[0]


NOT_A_FAILURE = "a status result, not a failure (polling, or the operation is still running)"
ALREADY = "benign: the requested state already holds; frameworks ignore it"
SUCCESS = "success code"
EXIT = "printed while the runtime unloads at process exit; fallout, never a cause"

FAMILIES: dict[str, Family] = {
    "cuda_runtime": Family(
        "CUDA runtime API (cudaError_t)",
        ("CuPy: `cupy_backends.cuda.api.runtime.CUDARuntimeError: <name>: ...`",),
        lambda e: [f"cupy_backends.cuda.api.runtime.CUDARuntimeError: {e['name']}: error"],
        {"cudaSuccess": SUCCESS, "cudaErrorNotReady": NOT_A_FAILURE,
         "cudaErrorPeerAccessAlreadyEnabled": ALREADY,
         "cudaErrorHostMemoryAlreadyRegistered": ALREADY, "cudaErrorCudartUnloading": EXIT}),
    "cuda_driver": Family(
        "CUDA driver API (CUresult)",
        ("XLA/TensorFlow: `failed call to cuInit: <NAME>: ...`",),
        lambda e: [f"failed call to cuInit: {e['name']}: error"],
        {"CUDA_SUCCESS": SUCCESS, "CUDA_ERROR_NOT_READY": NOT_A_FAILURE,
         "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED": ALREADY,
         "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED": ALREADY, "CUDA_ERROR_DEINITIALIZED": EXIT}),
    "nccl": Family(
        "NCCL (ncclResult_t)",
        ("PyTorch: `RuntimeError: NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version "
         "<v>`, with the message of NCCL >= 2.12 and the shorter one of older versions",),
        lambda e: [f"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                   f"ProcessGroupNCCL.cpp:1275, {m}, NCCL version 2.18.1"
                   for m in dict.fromkeys([e.get("message", e["name"]),
                                           _short(e.get("message", e["name"]))])],
        {"ncclSuccess": SUCCESS,
         "ncclInProgress": "a non-blocking communicator is still initialising; not a failure"}),
    "hip": Family(
        "HIP runtime (hipError_t)",
        ("HIP samples' HIPCHECK: `error: '<name>'(<value>) at <file>:<line>`",),
        lambda e: [f"error: '{e['name']}'({e['value']}) at train.cpp:61"],
        {"hipSuccess": SUCCESS, "hipErrorNotReady": NOT_A_FAILURE,
         "hipErrorPeerAccessAlreadyEnabled": ALREADY,
         "hipErrorHostMemoryAlreadyRegistered": ALREADY, "hipErrorDeinitialized": EXIT}),
    "hsa": Family(
        "ROCm HSA runtime (hsa_status_t)",
        ("ROCclr queue callback: `Callback: Queue <q> aborting with error : <NAME>: <message> "
         "code: <value>`",),
        lambda e: [f":0:rocdevice.cpp            :2614: 5128393475 us: Callback: Queue "
                   f"0x7f2a10000000 aborting with error : {e['name']}: "
                   f"{e.get('message', '')} code: {e['value']}"],
        {"HSA_STATUS_SUCCESS": SUCCESS,
         "HSA_STATUS_INFO_BREAK": "informational: a traversal was stopped by its callback"}),
    "level_zero": Family(
        "oneAPI Level Zero (ze_result_t)",
        ("chipStar / SYCL backends: `... (<NAME> ) in <file>:<line>`",),
        lambda e: [f"CHIP error [TID 1] [1693481190.609691528] : hipErrorTbd ({e['name']} ) "
                   f"in /src/CHIPBackendLevel0.cc:1374:enqueueBarrierImpl"],
        {"ZE_RESULT_SUCCESS": SUCCESS, "ZE_RESULT_NOT_READY": NOT_A_FAILURE,
         "ZE_RESULT_QUERY_TRUE": "a query answer, not an error",
         "ZE_RESULT_QUERY_FALSE": "a query answer, not an error",
         "ZE_RESULT_WARNING_DROPPED_DATA": "a warning result; the call succeeded",
         "ZE_RESULT_WARNING_ACTION_REQUIRED": "a warning result; the call succeeded",
         "ZE_RESULT_EXP_RTAS_BUILD_RETRY": "ray-tracing build status, not used by training",
         "ZE_RESULT_EXP_RTAS_BUILD_DEFERRED": "ray-tracing build status, not used by training",
         "ZE_RESULT_EXT_RTAS_BUILD_RETRY": "ray-tracing build status, not used by training",
         "ZE_RESULT_EXT_RTAS_BUILD_DEFERRED": "ray-tracing build status, not used by training"}),
    "absl": Family(
        "Abseil status codes as XLA/JAX report them (absl::StatusCode)",
        ("JAX: `jaxlib.xla_extension.XlaRuntimeError: <CODE>: <message>`",),
        lambda e: [f"jaxlib.xla_extension.XlaRuntimeError: {e['name']}: operation failed"],
        {"OK": SUCCESS}),
}


@dataclass(frozen=True)
class Row:
    """One upstream name and what the library does with it."""

    name: str
    value: str
    message: str
    caught_by: tuple[str, ...]
    excluded: str

    @property
    def status(self) -> str:
        if self.excluded:
            return "left out"
        return "covered" if self.caught_by else "NOT COVERED"


def _detect(engine: Engine, line: str) -> set[str]:
    sink = CollectingSink()
    scan_bytes(Pipeline(engine, [sink], clock=FakeClock()), StreamInfo("coverage", "-", "-"),
               (line + "\n").encode("utf-8"))
    return {d.signature for d in sink.detections if d.severity >= Severity.WARNING}


def evaluate(patterns: PatternSet | None = None) -> dict[str, tuple[dict[str, object], list[Row]]]:
    """family -> (enum data, rows), every name run through the real engine."""
    if patterns is None:
        patterns, errors = load_patterns([builtin_pattern_dir()])
        if errors:
            raise SystemExit("\n".join(str(e) for e in errors))
    engine = Engine(patterns)
    out: dict[str, tuple[dict[str, object], list[Row]]] = {}
    for family, spec in FAMILIES.items():
        data = json.loads((ENUMS / f"{family}.json").read_text(encoding="utf-8"))
        rows = []
        for entry in data["entries"]:
            excluded = spec.excluded.get(entry["name"], "")
            caught: set[str] = set()
            if not excluded:
                hits = [_detect(engine, line) for line in spec.render(entry)]
                caught = set.intersection(*hits) if hits else set()
            rows.append(Row(entry["name"], entry["value"], entry.get("message", ""),
                            tuple(sorted(caught)), excluded))
        out[family] = (data, rows)
    return out


def render(results: dict[str, tuple[dict[str, object], list[Row]]]) -> str:
    """The Markdown table, one section per family."""
    lines = ["# Coverage of upstream error names", "",
             "Generated by `bench/coverage.py` from the enumerations in `patterns/_enums/` "
             "(extracted from the projects' own sources by `bench/extract_enums.py`). Each name "
             "is rendered in the format it reaches logs in and run through the real engine; "
             "'covered' lists the signatures that raised an alarm (warning or above). "
             "`tests/patterns/test_coverage.py` keeps this file current.", ""]
    lines += ["| family | names | covered | left out on purpose | not covered |",
              "|---|---:|---:|---:|---:|"]
    for family, (data, rows) in results.items():
        counts = {s: sum(r.status == s for r in rows) for s in ("covered", "left out",
                                                                  "NOT COVERED")}
        lines.append(f"| {FAMILIES[family].title} | {len(rows)} | {counts['covered']} | "
                     f"{counts['left out']} | {counts['NOT COVERED']} |")
    for family, (data, rows) in results.items():
        spec = FAMILIES[family]
        lines += ["", f"## {spec.title}", "",
                  f"Source: <{data['source']}>"
                  + (f" (messages from `{data['messages_path']}` at the same commit)"
                     if data.get("messages_path") else ""),
                  "", "Rendered as: " + "; ".join(spec.formats), "",
                  "| name | value | status | caught by / reason |", "|---|---|---|---|"]
        for r in rows:
            why = ", ".join(f"`{s}`" for s in r.caught_by) if r.caught_by else r.excluded
            lines.append(f"| `{r.name}` | {r.value} | {r.status} | {why} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="Regenerate patterns/COVERAGE.md.")
    args = parser.parse_args(argv)
    text = render(evaluate())
    if args.write:
        OUTPUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUTPUT.relative_to(REPO)}")
        return 0
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    if current != text:
        print("patterns/COVERAGE.md is stale: run bench/coverage.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
