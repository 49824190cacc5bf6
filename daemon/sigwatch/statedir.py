"""Where the daemon keeps its state when the configuration does not say (stdlib only).

Kept apart from ``config`` (pydantic) so that ``sigwatch health`` finds the daemon's state
folder from a config file in a few milliseconds.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_state_dir"]


def default_state_dir() -> Path:
    """systemd's StateDirectory when set, /var/lib/sigwatch as root, else the user's state dir."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    if os.geteuid() == 0:
        return Path("/var/lib/sigwatch")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sigwatch"
