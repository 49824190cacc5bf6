"""Bytes to lines: splitting, limits, normalisation."""

from __future__ import annotations

__all__: list[str] = []
