"""The ``[policy]`` and ``[slurm]`` tables of the daemon's configuration.

.. code-block:: toml

    [policy]
    mode = "observe"              # observe: log and count what would be done; act: do it
    clean_window_seconds = 600    # after a reboot, this long without the fault clears it
    escalate_after_reboots = 2    # the fault comes back after this many reboots: escalate

    [policy.defaults.node]        # by owner, then severity: "drain" or "none"
    critical = "drain"

    [policy.signatures.nvidia_xid_48_double_bit_ecc]
    action = "drain"              # three within a day, not one
    count = 3
    window_seconds = 86400

    [slurm]
    node = ""                     # the NodeName (default: the daemon's node, short host name)
    conf = "/etc/slurm/slurm.conf"
    max_share = 0.10              # never leave more than this share of the partition drained
    max_per_hour = 3              # by sigwatch, nor drain more than this many nodes an hour

Precedence for one signature: built-in defaults (node-owned critical drains) < the
``[policy.defaults]`` of its owner and severity < the ``[policy]`` table of its signature file <
``[policy.signatures.<id>]`` here. A user-owned signature never drains a node, whatever is
written: the configuration refuses it (``user`` is not an owner in ``[policy.defaults]`` and a
rule asking to drain for one is an error at start-up).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "BOOT_ID_PATH",
    "OwnerDefaults",
    "PolicySettings",
    "RuleSettings",
    "SeverityActions",
    "SlurmSettings",
]

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
Action = Literal["none", "drain"]
SIG_ID = r"^[a-z][a-z0-9_]{2,63}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleSettings(_Strict):
    """What to do about one signature; only the keys given override."""

    action: Action | None = None
    count: int | None = Field(default=None, ge=1, le=10_000)
    window_seconds: float | None = Field(default=None, gt=0, le=366 * 86400)
    escalate_after_reboots: int | None = Field(default=None, ge=0, le=1000)
    recovered_by: list[str] | None = None
    reason: str | None = Field(default=None, min_length=1, max_length=100,
                               pattern=r"^[ -~]+$")


class SeverityActions(_Strict):
    """Action per severity for one owner."""

    info: Action = "none"
    warning: Action = "none"
    error: Action = "none"
    critical: Action = "none"

    def get(self, severity: str) -> str:
        return str(getattr(self, severity, "none"))


def _node_defaults() -> SeverityActions:
    return SeverityActions(critical="drain")


class OwnerDefaults(_Strict):
    """Defaults by owner. ``user`` cannot be given: a user's failure never drains a node."""

    node: SeverityActions = Field(default_factory=_node_defaults)
    fabric: SeverityActions = Field(default_factory=SeverityActions)
    unknown: SeverityActions = Field(default_factory=SeverityActions)

    @model_validator(mode="before")
    @classmethod
    def _no_user(cls, data: Any) -> Any:
        if isinstance(data, dict) and "user" in data:
            msg = ("user: a failure of the user's job never drains a node (the owner 'user' "
                   "has no defaults to set)")
            raise ValueError(msg)
        return data

    def action(self, owner: str, severity: str) -> str:
        table = getattr(self, owner, None) if owner != "user" else None
        return table.get(severity) if isinstance(table, SeverityActions) else "none"


class PolicySettings(_Strict):
    """What sigwatch does about node faults, and whether it does it or only says so."""

    mode: Literal["observe", "act"] = "observe"
    clean_window_seconds: float = Field(default=600.0, gt=0, le=7 * 86400)
    escalate_after_reboots: int = Field(default=2, ge=0, le=1000)
    defaults: OwnerDefaults = Field(default_factory=OwnerDefaults)
    signatures: dict[str, RuleSettings] = Field(default_factory=dict)
    # Where this boot's id is read (another file only for tests and odd containers; the boot
    # time then is when the daemon first saw the id).
    boot_id_path: str = BOOT_ID_PATH
    # How long lines already acted on and cleared faults are remembered.
    history_days: float = Field(default=30.0, gt=0, le=3650)

    @model_validator(mode="after")
    def _ids(self) -> PolicySettings:
        import re

        bad = [k for k in self.signatures if not re.match(SIG_ID, k)]
        if bad:
            msg = f"not a signature id: {', '.join(bad)}"
            raise ValueError(msg)
        return self


class SlurmSettings(_Strict):
    """Drain and resume this node through the Slurm controller (``scontrol``/``sinfo``)."""

    node: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,253}$")
    scontrol: str = Field(default="scontrol", min_length=1)
    sinfo: str = Field(default="sinfo", min_length=1)
    conf: str = ""  # SLURM_CONF for both commands ("": theirs)
    partition: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,64}$")
    timeout_seconds: float = Field(default=15.0, gt=0, le=300)
    max_share: float = Field(default=0.10, gt=0, le=1)
    max_per_hour: int = Field(default=3, ge=1, le=100_000)
    retry_seconds: float = Field(default=60.0, gt=0, le=3600)
