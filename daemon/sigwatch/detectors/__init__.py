"""Matches to detections: step sequences, root-cause correlation."""

from __future__ import annotations

__all__: list[str] = []
