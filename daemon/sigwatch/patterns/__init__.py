"""Signature files: schema, compilation and loading."""

from __future__ import annotations

__all__: list[str] = []
