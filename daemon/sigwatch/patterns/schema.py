"""The on-disk TOML schema of a signature file, as pydantic models (unknown keys are errors)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ACTIONS",
    "OWNERS",
    "CollateralSpec",
    "ContextSpec",
    "ExampleSpec",
    "KnownFalsePositive",
    "MatchSpec",
    "PolicySpec",
    "RemediationSpec",
    "SignatureFile",
    "StepSpec",
]

ACTIONS = (
    "drain_node", "reset_gpu", "restart_job", "fix_job_code", "fix_job_config",
    "upgrade_library", "fix_environment", "investigate", "none",
)
Action = Literal[
    "drain_node", "reset_gpu", "restart_job", "fix_job_code", "fix_job_config",
    "upgrade_library", "fix_environment", "investigate", "none",
]
SLUG = r"^[a-z][a-z0-9_]{2,63}$"
SourceKind = Literal["kernel", "job", "any"]
# Whose fault a detection is: the user's job, this node, the network fabric, or not known.
# A node-owned fault may drain the node; a user-owned one never blames a node.
Owner = Literal["user", "node", "fabric", "unknown"]
OWNERS: tuple[str, ...] = ("user", "node", "fabric", "unknown")


def _any_source() -> list[SourceKind]:
    return ["any"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class StepSpec(_Strict):
    """A follow-up step: must match within ``within_lines`` lines on the same stream and rank."""

    regex: str = Field(min_length=1)
    keywords: list[str] | None = None
    prefregex: str | None = Field(default=None, min_length=1)
    within_lines: int = Field(default=50, ge=1, le=10_000)


class MatchSpec(_Strict):
    """The first step, plus optional ordered follow-up steps."""

    regex: str = Field(min_length=1)
    keywords: list[str] | None = None
    prefregex: str | None = Field(default=None, min_length=1)
    then: list[StepSpec] = Field(default_factory=list)
    # One event printed over several lines (the OOM killer's report): matches of this
    # signature within this many lines of the previous one, on the same stream and rank, are
    # one detection (the last matched line, the earlier ones as context). 0: every match.
    # ``event_end``: a regex of the line that ends such an event (then it fires at once).
    event_lines: int = Field(default=0, ge=0, le=10_000)
    event_end: str | None = Field(default=None, min_length=1)


class ContextSpec(_Strict):
    """Lines before the trigger to quote in the detection (default: a few, for every signature)."""

    before: int | None = Field(default=None, ge=0, le=200)
    include: list[str] = Field(default_factory=list)


class RemediationSpec(_Strict):
    """The known fix."""

    summary: str = ""
    steps: list[str] = Field(default_factory=list)
    runbook: str = ""
    action: Action | None = None


class CollateralSpec(_Strict):
    """This signature is fallout of others; the detection names the root cause."""

    caused_by: list[str] = Field(min_length=1)
    within_seconds: float = Field(default=300.0, gt=0)
    severity: Literal["info", "warning", "error", "critical"] | None = None


class PolicySpec(_Strict):
    """What the node does about this signature (``sigwatch.faults``): overrides the config's
    defaults by owner and severity; a site's ``[policy.signatures.<id>]`` overrides it."""

    action: Literal["none", "drain"] | None = None
    count: int | None = Field(default=None, ge=1, le=10_000)
    window_seconds: float | None = Field(default=None, gt=0, le=366 * 86400)
    escalate_after_reboots: int | None = Field(default=None, ge=0, le=1000)
    # Signatures whose line says the fault is over (a recovery line): it clears the fault.
    recovered_by: list[str] = Field(default_factory=list)
    # The short fix quoted in the Slurm drain reason (default: the summary's first sentence).
    reason: str | None = Field(default=None, min_length=1, max_length=100, pattern=r"^[ -~]+$")


class ExampleSpec(_Strict):
    """An embedded test: log text that must (or must not) produce a detection."""

    kind: Literal["match", "no_match"]
    text: str = Field(min_length=1)
    note: str = ""


class KnownFalsePositive(_Strict):
    """A benign line this signature matches, recorded with the reason it is tolerated."""

    text: str = Field(min_length=1)
    reason: str = Field(min_length=1)


class SignatureFile(_Strict):
    """One signature file. Only ``id``, ``title``, ``severity`` and ``match.regex`` are required."""

    id: str = Field(pattern=SLUG)
    title: str = Field(min_length=1, max_length=120)
    severity: Literal["info", "warning", "error", "critical"]
    # Required at error and above (lint P014); absent means "unknown".
    owner: Owner | None = None
    description: str = ""
    status: Literal["experimental", "test", "stable"] = "experimental"
    labels: dict[str, str] = Field(default_factory=dict)
    incidents: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    falsepositives: list[str] = Field(default_factory=list)
    supersedes: list[str] = Field(default_factory=list)
    # A note (platform evidence, a configuration) worth saying once per stream, not per line.
    once_per_stream: bool = False
    # Which kinds of stream it applies to: "kernel" (kmsg, the journal's kernel messages),
    # "job" (training logs, stderr, containers), or "any". See sigwatch.patterns.kinds.
    sources: list[SourceKind] = Field(default_factory=_any_source, min_length=1)
    collateral: CollateralSpec | None = None
    match: MatchSpec
    context: ContextSpec = Field(default_factory=ContextSpec)
    remediation: RemediationSpec = Field(default_factory=RemediationSpec)
    policy: PolicySpec | None = None
    examples: list[ExampleSpec] = Field(default_factory=list)
    known_false_positives: list[KnownFalsePositive] = Field(default_factory=list)
