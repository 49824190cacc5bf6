"""Vendor error codes as the projects document them (``patterns/_enums/*.json``).

A record that carries a code its vendor's table lists (``EZ9999``, ``507014``,
``ACL_ERROR_RT_AICORE_TIMEOUT``, ``cudaErrorLaunchFailure``, ``ncclSystemError``, ``FI_EAGAIN``)
is named with the code's meaning. The tables are read once, when the detector is built; a
lookup is one regex pass over the message and a dictionary probe per candidate token.

Only families whose names are code tokens are used (not the message-only families such as vLLM
or SGLang, whose phrases the signatures read). Success and warning codes (``cudaSuccess``,
``HCCL_SUCCESS``, CANN ``W...`` codes, torch_npu ``ERRxx000``) are never reported.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FAMILY_COMPONENT", "Code", "CodeTable"]

FAMILY_COMPONENT: Mapping[str, str] = {
    "acl": "accelerator_runtime", "cann": "accelerator_runtime",
    "cann_rt": "accelerator_runtime", "cuda_driver": "accelerator_runtime",
    "cuda_runtime": "accelerator_runtime", "dcgm": "accelerator_runtime",
    "hip": "accelerator_runtime", "hsa": "accelerator_runtime",
    "level_zero": "accelerator_runtime", "nvml": "accelerator_runtime",
    "synapse": "accelerator_runtime", "torch_npu": "accelerator_runtime",
    "absl": "accelerator_runtime",
    "nccl": "collective", "hccl": "collective", "hcl": "collective",
    "efa": "interconnect", "libfabric": "interconnect",
}
"""Families read for codes, and the component a code of the family belongs to."""

# Names that say "no error" (success, info, not ready, warnings).
_NOT_ERROR_RE = re.compile(
    r"(?i)success|^(?:ok|none)$|_ok$|_none$|^acl_error_none$|^rt_error_none$"
    r"|not_?ready|^hsa_status_info|in_?progress|^k?success")
# absl/XLA status names are plain words ("UNKNOWN", "INTERNAL"): only those with an
# underscore, and only followed by a colon ("RESOURCE_EXHAUSTED: ..."), are codes.
_ABSL_USABLE_RE = re.compile(r"^[A-Z]+_[A-Z_]+$")
_FORMAT_RE = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[lhzjt]*[sdiuxXfgcp]|\{[^{}]{0,40}\}")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PREFIX_RE = re.compile(
    r"^(?:cudaError|CUDA_ERROR_|hipError|HSA_STATUS_ERROR_|HSA_STATUS_|ZE_RESULT_ERROR_|"
    r"ZE_RESULT_|nccl|hccl|syn|ACL_ERROR_RT_|ACL_ERROR_|RT_ERROR_|HCCL_E_|FI_|ERROR_|"
    r"DCGM_FR_|EFA_IO_COMP_STATUS_|FI_EFA_ERR_)")

# Candidate tokens: CANN error-manager codes (EZ9999, E39999), torch_npu ERRxxxxx,
# UPPER_SNAKE names, camelCase vendor names, and six-digit ACL return codes.
_TOKEN_RE = re.compile(
    r"\b(?:E[A-Z0-9]\d{4}|ERR\d{5}|[A-Z][A-Z0-9]{1,15}(?:_[A-Z0-9]+){1,10}"
    r"|(?:cuda|hip|nccl|hccl|syn)[A-Z][A-Za-z]{2,60}|[1-5]\d{5})\b")
# A bare six-digit number is an ACL code only where the line says it is a code.
_NUMERIC_CONTEXT_RE = re.compile(
    r"(?i)(?:error ?code|err(?:or)?_?no|ret(?:urn)?(?: ?code| ?value)?|code|status|result)"
    r"\s*(?:is|=|:)?\s*\[?$")


@dataclass(frozen=True, slots=True)
class Code:
    """One documented code: its family, the token as logs print it, and its meaning."""

    family: str
    name: str
    meaning: str

    @property
    def component(self) -> str:
        return FAMILY_COMPONENT.get(self.family, "other")

    @property
    def strong(self) -> bool:
        """A token that only ever names an error (``cudaErrorLaunchFailure``,
        ``HSA_STATUS_ERROR_FATAL``, CANN ``EZ9999``), not a status word (``FI_EAGAIN``)."""
        return ("rror" in self.name or "_ERR" in self.name or "_E_" in self.name
                or self.family in ("cann", "torch_npu", "absl") or self.name.isdigit())


def _meaning(name: str, value: str, message: str) -> str:
    text = _FORMAT_RE.sub("…", message).strip()
    if sum(ch.isalpha() for ch in text) >= 3:  # a message that is more than its parameters
        return text if len(text) <= 140 else text[:139] + "…"
    if value and not value.lstrip("-").isdigit() and not value.startswith("0x"):
        words = value  # a CANN errTitle ("Internal_Error") or an exception base class
    else:
        words = _PREFIX_RE.sub("", name)
    words = _CAMEL_RE.sub(" ", words.replace("_", " "))
    return " ".join(words.split()).lower()


class CodeTable:
    """Documented error codes by the token a log prints."""

    def __init__(self, codes: Iterable[Code] = ()) -> None:
        self._by_name: dict[str, Code] = {}
        for code in codes:
            self._by_name.setdefault(code.name, code)

    def __len__(self) -> int:
        return len(self._by_name)

    @classmethod
    def load(cls, folder: Path) -> CodeTable:
        """Every usable family in ``folder`` (``*.json``); raises ValueError naming a bad file."""
        codes: list[Code] = []
        for path in sorted(folder.glob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                family = str(data["family"])
                entries = list(data["entries"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}: not a vendor error table ({exc})") from exc
            if family not in FAMILY_COMPONENT:
                continue
            for entry in entries:
                name = str(entry.get("name", ""))
                value = str(entry.get("value", ""))
                if not name or _NOT_ERROR_RE.search(name) or value == "0":
                    continue
                if family == "cann" and name.startswith("W"):
                    continue  # warning codes: the runtime goes on
                if family == "torch_npu" and name.endswith("000"):
                    continue  # ERRxx000: the module's success code
                if family == "absl" and not _ABSL_USABLE_RE.match(name):
                    continue
                codes.append(Code(family, name, _meaning(name, value, str(
                    entry.get("message", "")))))
                if family == "acl" and value.isdigit() and len(value) == 6:
                    codes.append(Code(family, value, _meaning(name, "", str(
                        entry.get("message", ""))) or name))
        return cls(codes)

    def find(self, text: str) -> list[Code]:
        """The documented codes ``text`` carries, in the order they appear (each once)."""
        out: list[Code] = []
        seen: set[str] = set()
        for m in _TOKEN_RE.finditer(text):
            token = m.group()
            code = self._by_name.get(token)
            if code is None or token in seen:
                continue
            if token.isdigit() and _NUMERIC_CONTEXT_RE.search(text, 0, m.start()) is None:
                continue
            if code.family == "absl" and not text.startswith(":", m.end()):
                continue
            if code.family == "cann" and not (
                    text.startswith(":", m.end())
                    or (text[m.start() - 1:m.start()] == "(" and text.startswith(")", m.end()))):
                continue  # the error manager prints "EZ9999: ..." or "Title(EZ9999): ..."
            seen.add(token)
            out.append(code)
        return out
