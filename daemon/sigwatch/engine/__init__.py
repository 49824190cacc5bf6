"""Matching: literal prefilter, then bounded full regexes."""

from __future__ import annotations

__all__: list[str] = []
