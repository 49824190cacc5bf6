"""Offline checks over the signature library: self-test and lint."""

from __future__ import annotations

__all__: list[str] = []
