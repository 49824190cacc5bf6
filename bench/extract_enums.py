#!/usr/bin/env python3
"""Extract error enumerations from upstream sources into ``patterns/_enums/*.json``.

Run once per upstream update, with a local git checkout of each project (``--mirror DIR`` holds
``owner+name/repo`` bare repositories, e.g. from the research tool's snapshots). Only names,
numeric values and message texts are kept, with the source URL and commit; no code is copied.
``bench/coverage.py`` turns the data files into ``patterns/COVERAGE.md``.

    python3 bench/extract_enums.py --mirror DIR [--only FAMILY]...

Two kinds of family:

- ``SOURCES`` and ``EXTRACTORS``: read from a git snapshot of the emitting project, regenerated
  by this script (``--only`` limits the run to some families).
- ``RECORDED``: projects whose repository is too large for a snapshot here (Ray, vLLM, SGLang,
  TensorRT-LLM, PaddlePaddle, MindSpore). Their tables were recorded by hand from the files named
  in each JSON (``repository``, ``path``, ``commit``, and per entry ``path`` when it differs);
  this script checks them (``--check``) but does not rewrite them.

Every data file has ``family``, ``title``, ``repository``, ``path``, ``messages_path``, ``commit``,
``source`` and ``entries`` (``name``, ``value``, ``message``; optional ``group``, ``severity``,
``path``). ``name`` is the token as it reaches logs where the project prints one.
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


# --- families read with a function of their own ------------------------------------------------

Entries = list[dict[str, str]]


def _show(mirror: Path, repo: str, path: str) -> str:
    return _git(mirror, repo, "show", f"HEAD:{path}")


def _data(family: str, title: str, repo: str, path: str, entries: Entries, mirror: Path,
          messages_path: str = "") -> dict[str, object]:
    commit = _git(mirror, repo, "rev-parse", "HEAD").strip()
    return {
        "family": family, "title": title, "repository": f"https://github.com/{repo}",
        "path": path, "messages_path": messages_path, "commit": commit,
        "source": f"https://github.com/{repo}/blob/{commit}/{path}", "entries": entries,
    }


def _join_c_strings(text: str) -> str:
    """``"a" \\ newline "b"`` -> ``"ab"`` (macro continuations and adjacent literals)."""
    text = re.sub(r"\"\s*\\\s*\n\s*\"", "", text)
    return re.sub(r"\"\s*\n\s*\"", "", text)


CANN_RUNTIME = "hicann/runtime"
CANN_CODES = "src/dfx/error_manager/error_code.json"
CANN_GUIDE = "docs/zh/guidelines/error_message_guide/macro-selection-guide.md"
# The module column of the guide's table, in English (the guide is in Chinese).
CANN_MODULES = {"AI CPU": "AI CPU", "驱动": "driver", "HCCL": "HCCL", "GE": "graph engine (GE)",
                "Profiling": "profiling", "TBE": "operator (TBE/AclNN)", "系统": "system",
                "RTS": "runtime (RTS)", "FE": "fusion engine (FE)"}


def extract_cann(mirror: Path) -> dict[str, object]:
    """CANN's error-manager codes: the predefined table plus the internal X9999 codes."""
    table = json.loads(_show(mirror, CANN_RUNTIME, CANN_CODES))["error_info_list"]
    entries: dict[str, dict[str, str]] = {}
    for item in table:
        code = item["ErrCode"]
        if code in entries:
            continue
        entry = {"name": code, "value": item.get("errTitle", ""),
                 "message": " ".join(item["ErrMessage"].split())}
        if item.get("errClass"):
            entry["group"] = item["errClass"].strip()
        entries[code] = entry
    guide = _show(mirror, CANN_RUNTIME, CANN_GUIDE)
    modules: dict[str, list[str]] = {}
    for m in re.finditer(r"^\| ERR_MODULE_\w+ \| (E\w9999) \| (.+?) ?模块", guide, re.M):
        modules.setdefault(m[1], []).append(CANN_MODULES.get(m[2], m[2]))
    for code, names in modules.items():
        entries.setdefault(code, {"name": code, "value": "Internal_Error",
                                  "message": f"internal error of the {' / '.join(names)} module "
                                             f"(no template: the raw message follows)"})
    # Two more internal codes the guide names outside its table: ACL's and the error manager's
    # own fallback ("E19999: Internal error!" when nothing was reported).
    for code, module in (("EH9999", "ACL"), ("E19999", "graph engine (GE)")):
        entries.setdefault(code, {"name": code, "value": "Internal_Error",
                                  "message": f"internal error of the {module} module "
                                             f"(no template: the raw message follows)"})
    return _data("cann", "Huawei CANN error codes (error manager: EXXXXX)", CANN_RUNTIME,
                 CANN_CODES, list(entries.values()), mirror, messages_path=CANN_GUIDE)


def extract_acl(mirror: Path) -> dict[str, object]:
    """ACL / runtime return codes (aclError), messages as torch_npu explains them."""
    base = _show(mirror, CANN_RUNTIME, "include/external/acl/acl_base_rt.h")
    rt = _show(mirror, CANN_RUNTIME, "include/external/acl/error_codes/rt_error_codes.h")
    explained = _show(mirror, "Ascend/pytorch", "torch_npu/csrc/core/npu/NPUErrorCodes.h")
    explained = re.sub(r"\\\n\s*", "", explained)
    messages = {m[1]: m[2].split("\\n")[0].strip()
                for m in re.finditer(r"\{(\d+),\s*\"([^\"]+)\"", explained)}
    entries: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"static const int (ACL_\w+) = (\d+);", base):
        entries.setdefault(m[1], {"name": m[1], "value": m[2],
                                  "message": messages.get(m[2], "")})
    rt = re.sub(r"\\\n\s*", "", rt)
    for m in re.finditer(r"#define (ACL_\w+) (\d+)\s*// ?(.*)", rt):
        entries.setdefault(m[1], {"name": m[1], "value": m[2],
                                  "message": messages.get(m[2]) or m[3].strip()})
    return _data("acl", "Huawei CANN ACL / runtime return codes (aclError)", CANN_RUNTIME,
                 "include/external/acl/error_codes/rt_error_codes.h", list(entries.values()),
                 mirror, messages_path="torch_npu/csrc/core/npu/NPUErrorCodes.h (Ascend/pytorch)")


def extract_cann_rt(mirror: Path) -> dict[str, object]:
    """The runtime's internal rtError codes and the reason text it logs for each."""
    values = {m[1]: m[2] for m in re.finditer(
        r"constexpr int32_t (RT_ERROR_\w+)\s*=\s*(0x[0-9A-Fa-f]+)",
        _show(mirror, CANN_RUNTIME, "src/runtime/core/inc/common/internal_error_define.hpp"))}
    manage = _show(mirror, CANN_RUNTIME, "src/runtime/core/src/common/errcode_manage.cc")
    manage = _join_c_strings(manage)
    entries: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"rtErrMap_\[(RT_ERROR_\w+)\]\s*=\s*\{\s*\w+,\s*\"([^\"]*)\"\s*\}",
                         manage):
        entries.setdefault(m[1], {"name": m[1], "value": values.get(m[1], ""),
                                  "message": m[2]})
    return _data("cann_rt", "Huawei CANN runtime internal errors (rtError reasons)", CANN_RUNTIME,
                 "src/runtime/core/src/common/errcode_manage.cc", list(entries.values()), mirror,
                 messages_path="src/runtime/core/inc/common/internal_error_define.hpp")


def extract_hccl(mirror: Path) -> dict[str, object]:
    """Ascend HCCL return codes (HcclResult) as torch_npu ships the header."""
    path = "third_party/hccl/inc/hccl/hccl_types.h"
    text = _show(mirror, "Ascend/pytorch", path)
    text = text[text.index("HCCL_SUCCESS"):text.index("} HcclResult;")]
    entries = [{"name": m[1], "value": m[2], "message": m[3].strip()}
               for m in re.finditer(r"(HCCL_\w+) = (\d+),\s*/\*\*< (.*?)\*/", text)]
    return _data("hccl", "Huawei HCCL return codes (HcclResult)", "Ascend/pytorch", path,
                 entries, mirror)


def extract_dcgm(mirror: Path) -> dict[str, object]:
    """DCGM health and diagnostic failure codes (dcgmError_t) with message, severity, category."""
    path = "dcgmlib/dcgm_errors.h"
    header = _join_c_strings(_show(mirror, "NVIDIA/DCGM", path))
    enum = header[header.index("typedef enum dcgmError_enum"):header.index("} dcgmError_t;")]
    messages = {m[1]: m[2] for m in re.finditer(
        r"#define (DCGM_FR_\w+)_MSG\s+(?:\\\s*)?\"([^\"]*)\"", header)}
    table = _show(mirror, "NVIDIA/DCGM", "dcgmlib/src/dcgm_errors.c")
    meta = {m[1]: (m[2], m[3]) for m in re.finditer(
        r"DCGM_ERROR_TABLE_ENTRY\((DCGM_FR_\w+),\s*(DCGM_ERROR_\w+),\s*(DCGM_FR_EC_\w+)\)", table)}
    entries = []
    for m in re.finditer(r"^\s*(DCGM_FR_\w+)\s*=\s*(\d+)", enum, re.M):
        if m[1] == "DCGM_FR_ERROR_SENTINEL":
            continue
        severity, category = meta.get(m[1], ("", ""))
        entries.append({"name": m[1], "value": m[2], "message": messages.get(m[1], ""),
                        "severity": severity, "group": category})
    return _data("dcgm", "NVIDIA DCGM health and diagnostic errors (dcgmError_t)", "NVIDIA/DCGM",
                 path, entries, mirror, messages_path="dcgmlib/src/dcgm_errors.c")


def extract_nvml(mirror: Path) -> dict[str, object]:
    """NVML return codes as go-nvml names them (the k8s device plugin logs these names)."""
    repo, path = "NVIDIA/k8s-device-plugin", "vendor/github.com/NVIDIA/go-nvml/pkg/nvml/nvml.h"
    text = _show(mirror, repo, path)
    entries = [{"name": m[1].removeprefix("NVML_"), "value": m[2], "message": m[3].strip()}
               for m in re.finditer(r"^\s*(NVML_(?:SUCCESS|ERROR_\w+))\s*=\s*(\d+),?\s*//!< (.*)$",
                                    text, re.M)]
    return _data("nvml", "NVML return codes as the NVIDIA k8s device plugin logs them (go-nvml)",
                 repo, path, entries, mirror,
                 messages_path="vendor/github.com/NVIDIA/go-nvml/pkg/nvml/return.go")


def extract_libfabric(mirror: Path) -> dict[str, object]:
    """libfabric return codes (fi_errno) with the text fi_strerror() gives on Linux."""
    import errno
    import os

    repo, path = "ofiwg/libfabric", "include/rdma/fi_errno.h"
    header = _show(mirror, repo, path)
    errstr = {m[1]: m[2] for m in re.finditer(r"\[(FI_E\w+) - FI_ERRNO_OFFSET\]\s*=\s*\"([^\"]+)\"",
                                              _show(mirror, repo, "src/fabric.c"))}
    entries = [{"name": "FI_SUCCESS", "value": "0", "message": "Success"}]
    for m in re.finditer(r"^#define\s+(FI_E\w+)\s+(E\w+)\s+/\*\s*(.*?)\s*\*/", header, re.M):
        number = getattr(errno, m[2], None)
        if number is None:
            continue
        # fi_strerror() returns strerror() for these: glibc's text, which is what logs show.
        entries.append({"name": m[1], "value": str(number), "message": os.strerror(number)})
    for m in re.finditer(r"^\s*(FI_E\w+)\s*=\s*(\d+|FI_ERRNO_OFFSET),", header, re.M):
        value = "256" if m[2] == "FI_ERRNO_OFFSET" else m[2]
        entries.append({"name": m[1], "value": value, "message": errstr.get(m[1], "")})
    return _data("libfabric", "libfabric return codes (fi_errno)", repo, path, entries, mirror,
                 messages_path="src/fabric.c (fi_strerror) and glibc strerror() for errno values")


def extract_efa(mirror: Path) -> dict[str, object]:
    """EFA provider completion statuses and provider errors (efa_strerror)."""
    repo, path = "ofiwg/libfabric", "prov/efa/src/efa_errno.h"
    text = _show(mirror, repo, path)
    text = text[text.index("#define EFA_IO_COMP_STATUSES(_)"):]
    entries = []
    for m in re.finditer(r"_\((\d+),\s*(\w+),\s*(.*?)\)\s*\\?\s*$", text, re.M):
        prefix = "EFA_IO_COMP_STATUS_" if int(m[1]) < 4096 else "FI_EFA_ERR_"
        entries.append({"name": prefix + m[2], "value": m[1], "message": m[3].strip()})
    return _data("efa", "AWS EFA provider errors (efa_errno, efa_strerror)", repo, path, entries,
                 mirror)


def extract_synapse(mirror: Path) -> dict[str, object]:
    """Habana SynapseAI status codes with the brief description the PyTorch bridge prints."""
    repo, path = "HabanaAI/Intel_Gaudi3_Software", "synapse/include/synapse_common_types.h"
    header = _show(mirror, repo, path)
    enum = header[header.index("typedef enum synStatus"):header.index("} synStatus;")]
    briefs = {m[1]: m[2] for m in re.finditer(
        r"SYN_STR\((syn\w+),\s*\"([^\"]*)\"\)",
        _show(mirror, repo, "synapse/src/runtime/common/syn_singleton.cpp"))}
    entries = [{"name": m[1], "value": m[2], "message": briefs.get(m[1], "")}
               for m in re.finditer(r"^\s*(syn\w+)\s*=\s*(\d+),", enum, re.M)]
    return _data("synapse", "Habana SynapseAI status codes (synStatus)", repo, path, entries,
                 mirror, messages_path="synapse/src/runtime/common/syn_singleton.cpp")


def extract_hcl(mirror: Path) -> dict[str, object]:
    """Habana HCL (Gaudi collectives) result codes; implicit values counted from hcclSuccess."""
    repo, path = "HabanaAI/HCL", "hcl/include/hccl_types.h"
    text = _show(mirror, repo, path)
    text = text[text.index("/* Error type */"):text.index("} hcclResult_t;")]
    entries, value = [], 0
    for m in re.finditer(r"^\s*(hccl\w+)(?:\s*=\s*(-?\d+))?,?\s*$", text, re.M):
        value = int(m[2]) if m[2] is not None else value + 1
        if m[1] == "hcclNumResults":
            continue
        entries.append({"name": m[1], "value": str(value), "message": ""})
    return _data("hcl", "Habana HCL result codes (hcclResult_t, Gaudi)", repo, path, entries,
                 mirror)


def extract_horovod(mirror: Path) -> dict[str, object]:
    """Horovod's status types and the exceptions its Python API raises."""
    repo = "horovod/horovod"
    common = _show(mirror, repo, "horovod/common/common.h")
    types = re.search(r"enum StatusType \{([^}]*)\}", common)
    assert types is not None
    entries = [{"name": name.strip(), "value": str(i), "message": "Horovod status type (StatusType)"}
               for i, name in enumerate(types[1].split(","))]
    exceptions = _show(mirror, repo, "horovod/common/exceptions.py")
    for m in re.finditer(r"class (\w+)\((\w+)\):\s*\n\s*\"\"\"(.*?)\"\"\"", exceptions, re.S):
        entries.append({"name": m[1], "value": m[2],
                        "message": " ".join(m[3].split("\n\n")[0].split()),
                        "path": "horovod/common/exceptions.py"})
    return _data("horovod", "Horovod status types and exceptions", repo, "horovod/common/common.h",
                 entries, mirror, messages_path="horovod/common/exceptions.py")


def extract_torch_npu(mirror: Path) -> dict[str, object]:
    """torch_npu's own error codes ERR<submodule:2><code:3>, every combination it can print."""
    repo, path = "Ascend/pytorch", "torch_npu/utils/_error_code.py"
    text = _show(mirror, repo, path)
    block = text[text.index("class _SubModuleID"):text.index("class ErrCode")]
    modules = [(m[1], int(m[2])) for m in re.finditer(r"^\s+(\w+) = (\d+)$", block, re.M)]
    codes = [(int(m[1]), m[2]) for m in re.finditer(r"^\s+\w+ = \((\d+), \"([^\"]+)\"\)",
                                                     text, re.M)]
    entries = [{"name": f"ERR{module_id:02d}{code:03d}", "value": str(code),
                "message": f"{module} {message}", "group": module}
               for module, module_id in modules for code, message in codes]
    return _data("torch_npu", "torch_npu error codes (ERR<submodule><code>)", repo, path,
                 entries, mirror, messages_path="torch_npu/csrc/core/npu/NPUException.cpp")


EXTRACTORS = {
    "cann": extract_cann, "acl": extract_acl, "cann_rt": extract_cann_rt, "hccl": extract_hccl,
    "dcgm": extract_dcgm, "nvml": extract_nvml, "libfabric": extract_libfabric, "efa": extract_efa,
    "synapse": extract_synapse, "hcl": extract_hcl, "horovod": extract_horovod,
    "torch_npu": extract_torch_npu,
}

# Recorded by hand (repository over the snapshot size limit): checked, never rewritten here.
RECORDED = ("ray", "vllm", "sglang", "trtllm", "paddle", "mindspore")
REQUIRED = ("family", "title", "repository", "path", "messages_path", "commit", "source",
            "entries")


def check(family: str) -> list[str]:
    """Problems with one data file: missing keys, a bad commit, empty or duplicate names."""
    data = json.loads((OUT / f"{family}.json").read_text(encoding="utf-8"))
    problems = [f"{family}: missing {key}" for key in REQUIRED if key not in data]
    if not re.fullmatch(r"[0-9a-f]{40}", str(data.get("commit", ""))):
        problems.append(f"{family}: commit is not 40 hex digits")
    names = [e.get("name", "") for e in data.get("entries", [])]
    problems += [f"{family}: entry without name" for n in names if not n]
    problems += [f"{family}: duplicate {n}" for n in sorted({n for n in names if names.count(n) > 1})]
    return problems


def _write(family: str, data: dict[str, object]) -> None:
    (OUT / f"{family}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    print(f"{family}: {len(data['entries'])} names from {data['source']}")  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirror", type=Path)
    parser.add_argument("--only", action="append", default=[], metavar="FAMILY")
    parser.add_argument("--check", action="store_true",
                        help="Only check every data file (including the recorded ones).")
    args = parser.parse_args(argv)
    if args.check:
        families = [s.family for s in SOURCES] + list(EXTRACTORS) + list(RECORDED)
        problems = [p for family in families for p in check(family)]
        print("\n".join(problems) or f"{len(families)} data files: ok")
        return 1 if problems else 0
    if args.mirror is None:
        parser.error("--mirror is required unless --check")
    OUT.mkdir(parents=True, exist_ok=True)
    for source in SOURCES:
        if not args.only or source.family in args.only:
            _write(source.family, extract(source, args.mirror))
    for family, function in EXTRACTORS.items():
        if not args.only or family in args.only:
            _write(family, function(args.mirror))
    return 0


if __name__ == "__main__":
    sys.exit(main())
