"""Diagnostics that report a failed check, in the forms the tools print.

- ``nvidia-smi -q``: ``Pending : Yes`` under *Retired Pages* or *Remapped Rows*,
  ``Remapping Failure Occurred : Yes``, ``Pending Page Blacklist : Yes``, ``Reset Required :
  Yes``, ``Drain and Reset Recommended : Yes``; the table's ``ERR!`` fields (a GPU the driver
  lost);
- ``npu-smi info``: a chip whose *Health* is ``Alarm``, ``Critical`` or ``Warning``, and
  ``npu-smi info -t health``'s ``Health Status : Alarm``;
- ``ascend-dmi -dg``: an item whose result line is ``FAIL`` or ``..._WARN`` (its JSON form,
  and other tools' JSON, as ``"result": "FAIL"``);
- nccl-tests: a non-zero ``#wrong`` column in the result table (read with the table's own
  header, see ``NcclTable``) and ``# Out of bounds values : N FAILED``;
- compute-sanitizer / cuda-memcheck ``ERROR SUMMARY: N errors`` with N > 0, and each error's
  own report (``========= Invalid __global__ write of size 4 bytes``); gpu-burn's ``FAULTY``;
- a diagnostic's overall result ``Fail`` (xpu-smi diag's ``| Result | Fail |``), and a
  checklist's line whose verdict comes last (``nvidia-smi: Expected GPU count: 1, found
  inside the VM: 0 : FAIL``);
- health-check runners (LBNL NHC, slurmd's ``error: health_check failed: rc:1 output:...``,
  and the wrappers clouds ship around NHC: ``ERROR: nhc: Health check failed: ...``, ``Node
  Health Checks failed - ... - Check check_x returned 127``): a health check that failed, or a
  check that returned a non-zero status;
- a device health table or key-value report whose overall health is not OK (``Overall Health:
  Warning``, ``Health: Critical``) or that counts error codes (``ErrorCode Num: 1``);
- node labels a health checker sets (``autopilot.ibm.com/gpuhealth=EVICT``,
  ``.../dcgm.level.3=ERR_...``): a label whose name says health, diagnostics or checks and
  whose value starts with ERR, FAIL, EVICT or UNHEALTHY.

DCGM (``dcgmi diag`` tables and JSON, ``dcgmi health``) is read by the DCGM signatures; this
module does not repeat them. Passing checks (``Pending : No``, ``Health OK``, ``PASS``,
``#wrong 0``, ``0 errors``, ``returned 0``, ``ErrorCode Num: 0``, ``gpuhealth=PASS``) stay
quiet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sigwatch.detectors.generic._text import clip

__all__ = ["FailedCheck", "NcclTable", "match_check"]


@dataclass(frozen=True, slots=True)
class FailedCheck:
    """A diagnostic's failed check: which tool, what failed, and how bad (error|warning)."""

    tool: str
    check: str
    severity: str


_SMI_FLAG_RE = re.compile(
    r"^\s*(?P<what>Pending(?: Page Blacklist| Page Retirement)?|Remapping Failure Occurred"
    r"|Remapping [Pp]ending|Reset Required|Drain and Reset Recommended)\s*:\s*Yes\b")
_SMI_ERR_RE = re.compile(r"^\|.{0,60}\bERR!")
_NPU_TABLE_RE = re.compile(
    r"^\|\s*\d{1,3}\s+[\w-]{2,20}\s*\|\s*(?P<health>Alarm|Critical|Warning|Error)\s*\|")
_NPU_HEALTH_RE = re.compile(r"^\s*Health Status\s*:\s*(?P<health>Alarm|Critical|Warning|Error)\b")
_DMI_RESULT_RE = re.compile(
    r"^\s{2,}(?P<result>FAIL|EMERGENCY_WARN|IMPORTANT_WARN|GENERAL_WARN|WARN)\s*$")
_DMI_ITEM_RE = re.compile(r"^\s{2,}(?P<item>[A-Za-z][\w ]{1,40}):\s*$")
_JSON_RESULT_RE = re.compile(
    r"\"(?P<key>[Rr]esult|[Ss]tatus|[Hh]ealth(?:[ _]?[Ss]tatus)?|test_result)\"\s*:\s*"
    r"\"(?P<result>FAIL|FAILED|Fail|Failed|fail|failed|EMERGENCY_WARN|IMPORTANT_WARN|Alarm"
    r"|Critical)\"")
# (older nccl-tests print it without the "#")
_OUT_OF_BOUNDS_RE = re.compile(r"^[#\s]*Out of bounds values\s*:\s*(?P<n>\d+)\s+FAILED")
_SANITIZER_RE = re.compile(r"^=+ ERROR SUMMARY: (?P<n>\d+) errors?")
# compute-sanitizer's (cuda-memcheck's) own report of each error, before its summary (a run cut
# short, or a log that ends before the summary): "========= Invalid __global__ write of size 4
# bytes" (an API call's error, "Program hit cudaError...", may be one the program handles).
_SANITIZER_ERROR_RE = re.compile(
    r"^=+ (?P<what>Invalid __(?:global|shared|local)__ (?:read|write|atomic) of size \d{1,6})")
# A diagnostic's overall result as a table row or a key-value line (xpu-smi diag's "| Result |
# Fail |", an item's "| Result: Fail |").
_RESULT_FAIL_RE = re.compile(
    r"(?:^|\|)\s*(?:Overall )?(?P<key>Result|Test Result)\s*[|:]\s*"
    r"(?P<result>Fail(?:ed)?|FAIL(?:ED)?)\s*(?:\||$)")
# Health-check runners. Retries are answers to a poll, not a verdict; a counter at 0 says
# nothing failed.
_HEALTH_FAILED_RE = re.compile(
    r"(?i)\bhealth[ _-]?checks? (?:has |have )?failed\b"
    r"(?!\s*(?:count|total|num(?:ber)?)?\s*[:=]\s*0\b)(?!.{0,80}\bretry)")
_CHECK_RETURNED_RE = re.compile(
    r"\b[Cc]heck:? (?P<name>[\w.-]{2,80}) (?:returned|exited with|failed with)"
    r"(?: (?:code|status|exit code))?:? (?P<n>-?\d{1,4})\b")
# A device health report: a table cell or a key-value line (asys, npu-smi, vendor tools).
_HEALTH_FIELD_RE = re.compile(
    r"(?:^|\|)\s*(?:Overall |Device |Chip )?Health(?: Status)?\s*:\s*"
    r"(?P<health>Alarm|Critical|Warning|Error|Fault|Abnormal|Unhealthy)\b")
_ERROR_CODE_COUNT_RE = re.compile(
    r"(?:^|\|)\s*Error ?Code ?(?:Num(?:ber)?|Count|Cnt)\s*:\s*(?P<n>\d{1,6})\b")
# Node labels a health checker sets (``<prefix>/<name>=<value>``).
_HEALTH_LABEL_RE = re.compile(
    r"(?:^|[\s,{\"])(?P<label>(?:[\w.-]{1,120}/)?[\w.-]{0,60}(?:health|dcgm|diag|check|nhc)"
    r"[\w.-]{0,60})=\"?(?P<value>(?:ERR|FAIL|EVICT|UNHEALTHY|Unhealthy|Failed)[\w.:-]{0,80})")
# nccl-tests' (and rccl-tests') own check of every call: "<host>: Test NCCL failure
# common.cu:775 'unhandled cuda error ...'" (also "Test CUDA failure", "Test HIP failure").
_NCCL_TESTS_FAILURE_RE = re.compile(
    r"\bTest (?P<lib>NCCL|RCCL|CUDA|HIP) failure \S{1,300}:\d{1,6} '(?P<what>[^']{1,200})")
# ``nvidia-smi nvlink -s``: a link of an NVLink GPU that is down ("Link 3: <inactive>").
_NVLINK_INACTIVE_RE = re.compile(r"^\s*Link (?P<link>\d{1,2}): <inactive>\s*$")
# fi_info (libfabric) finding no usable provider: "fi_getinfo: -61 (No data available)".
_FI_GETINFO_RE = re.compile(r"^fi_getinfo: (?P<code>-\d{1,4})\b")
# A checklist's line: what was checked, what was found, and the verdict last after " : "
# (LISA's GPU validation: "nvidia-smi: Expected GPU count: 1, found inside the VM: 0 : FAIL").
_CHECKLIST_FAIL_RE = re.compile(
    r"^\s*(?P<check>[A-Za-z][\w .()/-]{1,60}): (?P<what>\S.{0,200}?) : FAIL(?:ED)?\s*$")
_GPU_BURN_RE = re.compile(r"\bGPU \d{1,3}: FAULTY\b|^\s*\d{1,3}\.\d+%\s+proc'd:.*\bFAULTY\b")
# Words every failed check above needs (its verdict or its subject), tried before them with
# ``in``: most lines the generic layer reads hold an error word and none of these. Each is a
# substring of what one of the patterns requires ("ail" of [Ff]ail(ed); "heck" of [Cc]heck);
# "health" is tried on the lowered text for the one pattern that ignores case.
_CHECK_WORDS = ("Yes", "ERR", "fi_getinfo", "<inactive>", "Alarm", "Critical", "Warning",
                "Error", "FAIL", "WARN", "ail", "Out of bounds", "FAULTY", "heck", "EVICT",
                "UNHEALTHY", "Unhealthy", "Abnormal", "Fault", "Invalid __")


def match_check(text: str, previous: str = "") -> FailedCheck | None:
    """The failed check ``text`` reports (``previous``: the line before it), or None."""
    if not any(word in text for word in _CHECK_WORDS) and "health" not in text.lower():
        return None
    return read_check(text, previous)


def read_check(text: str, previous: str = "") -> FailedCheck | None:
    """``match_check`` without its word gate (what the gate is tested against)."""
    m = _SMI_FLAG_RE.match(text)
    if m is not None:
        return FailedCheck("nvidia-smi", f"{m.group('what')}: Yes", "error")
    if _SMI_ERR_RE.match(text):
        return FailedCheck("nvidia-smi", "a GPU reports ERR!", "error")
    m = _NPU_TABLE_RE.match(text) or _NPU_HEALTH_RE.match(text)
    if m is not None:
        health = m.group("health")
        return FailedCheck("npu-smi", f"health {health}",
                           "warning" if health == "Warning" else "error")
    m = _DMI_RESULT_RE.match(text)
    if m is not None:
        item = _DMI_ITEM_RE.match(previous)
        if item is not None:
            result = m.group("result")
            return FailedCheck("ascend-dmi", f"{item.group('item')}: {result}",
                               "error" if result in ("FAIL", "EMERGENCY_WARN") else "warning")
        return None
    m = _JSON_RESULT_RE.search(text)
    if m is not None:
        return FailedCheck("diagnostic", clip(f"{m.group('key')}: {m.group('result')}", 80),
                           "error")
    m = _OUT_OF_BOUNDS_RE.match(text)
    if m is not None and int(m.group("n")) > 0:
        return FailedCheck("nccl-tests", f"{m.group('n')} out of bounds values", "error")
    m = _SANITIZER_RE.match(text)
    if m is not None and int(m.group("n")) > 0:
        return FailedCheck("compute-sanitizer", f"{m.group('n')} errors", "error")
    m = _SANITIZER_ERROR_RE.match(text)
    if m is not None:
        return FailedCheck("compute-sanitizer", clip(m.group("what"), 80), "error")
    m = _RESULT_FAIL_RE.search(text)
    if m is not None:
        return FailedCheck("diagnostic", f"{m.group('key')}: {m.group('result')}", "error")
    m = _CHECKLIST_FAIL_RE.match(text)
    if m is not None:
        return FailedCheck("checklist", clip(f"{m.group('check')}: {m.group('what')}", 80),
                           "error")
    if _GPU_BURN_RE.search(text):
        return FailedCheck("gpu-burn", "FAULTY", "error")
    m = _NCCL_TESTS_FAILURE_RE.search(text)
    if m is not None:
        return FailedCheck("nccl-tests", clip(f"{m.group('lib')} failure: {m.group('what')}", 80),
                           "error")
    m = _NVLINK_INACTIVE_RE.match(text)
    if m is not None:
        return FailedCheck("nvidia-smi", f"NVLink {m.group('link')} inactive", "warning")
    m = _FI_GETINFO_RE.match(text)
    if m is not None:
        return FailedCheck("fi_info", f"no provider (fi_getinfo {m.group('code')})", "error")
    return _health_check(text, previous)


def _health_check(text: str, previous: str) -> FailedCheck | None:
    """Health-check runners, device health reports and health labels (see the docstring)."""
    m = _CHECK_RETURNED_RE.search(text)
    if m is not None:
        if m.group("n") == "0":
            return None
        return FailedCheck("health check", clip(f"{m.group('name')} returned {m.group('n')}",
                                                80), "error")
    if _HEALTH_FAILED_RE.search(text):
        return FailedCheck("health check", clip(text, 80), "error")
    m = _HEALTH_FIELD_RE.search(text)
    if m is not None:
        health = m.group("health")
        return FailedCheck("device health", f"health {health}",
                           "warning" if health == "Warning" else "error")
    m = _ERROR_CODE_COUNT_RE.search(text)
    if m is not None:
        if int(m.group("n")) == 0:
            return None
        health = _HEALTH_FIELD_RE.search(previous)
        said = f", health {health.group('health')}" if health is not None else ""
        return FailedCheck("device health", f"{m.group('n')} error codes{said}",
                           "warning" if health is not None and health.group("health")
                           == "Warning" else "error")
    m = _HEALTH_LABEL_RE.search(text)
    if m is not None:
        return FailedCheck("health label", clip(f"{m.group('label')}={m.group('value')}", 120),
                           "error")
    return None


_NCCL_HEADER_RE = re.compile(r"^#\s+(?:out-of-place|size)\b.*#wrong")
_NCCL_ROW_RE = re.compile(r"^\s+\d+\s+\d+\s+\w+\s")


class NcclTable:
    """The result table of an nccl-tests run, read with the columns its header names.

    ``#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw
    #wrong`` (out-of-place, then in-place): a row whose ``#wrong`` is not 0 (or ``N/A`` for a
    test that checks nothing) is a failed check.
    """

    def __init__(self, header: str) -> None:
        names = header.lstrip("#").split()
        self.wrong = [i for i, name in enumerate(names) if name == "#wrong"]
        self.width = len(names)

    @staticmethod
    def header(text: str) -> bool:
        return _NCCL_HEADER_RE.match(text) is not None

    def row(self, text: str) -> FailedCheck | bool | None:
        """A failed check, None for a passing row, False when the line is not a row."""
        if not _NCCL_ROW_RE.match(text):
            return False
        cells = text.split()
        bad = [cells[i] for i in self.wrong if i < len(cells)
               and cells[i] not in ("0", "N/A")]
        if not bad:
            return None
        return FailedCheck("nccl-tests", f"#wrong {bad[0]} at size {cells[0]}", "error")
