"""sigwatch: recognise GPU training failures in logs, export them, hand on-call the fix."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__`` is looked up on first use: importing the package stays instant, so
    ``sigwatch run`` installs its signal handlers before anything slow happens."""
    if name != "__version__":
        raise AttributeError(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("sigwatch")
    except PackageNotFoundError:  # running from a source tree without an install
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found
