"""Self-metrics catalogue and logging configuration."""

from __future__ import annotations

__all__: list[str] = []
