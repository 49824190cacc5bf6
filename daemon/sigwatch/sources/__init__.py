"""Where bytes come from: tailed files (later: journald, /dev/kmsg, child stderr)."""

from __future__ import annotations

__all__: list[str] = []
