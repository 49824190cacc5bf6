"""sigwatch: recognise GPU training failures in logs, export them, hand on-call the fix."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("sigwatch")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
