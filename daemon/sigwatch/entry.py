"""The program's entry point: the ``sigwatch`` command and ``python -m sigwatch``.

``sigwatch run`` must survive a SIGHUP at any moment (logrotate's postrotate, a reload racing a
restart), and the default action of SIGHUP terminates the process. Start-up imports take 60 to
500 ms on a busy machine, so the handlers are installed here, before anything but ``signal`` is
imported: until the daemon is built, SIGHUP, SIGTERM and SIGINT only set flags, and
``run_daemon`` acts on them once it is ready (a reload, or a clean stop). What is left is the
interpreter's own start-up, before any of our code runs (``bench/early_signals.py`` measures
it).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

__all__ = ["EarlySignals", "main"]


class EarlySignals:
    """Remember SIGHUP/SIGTERM/SIGINT received before the daemon can act on them."""

    installed: EarlySignals | None = None

    def __init__(self) -> None:
        self.reload = False
        self.stop: int | None = None

    @classmethod
    def install(cls) -> EarlySignals:
        """Install the flag-setting handlers (idempotent); returns the recorder."""
        if cls.installed is None:
            early = cls()
            for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
                try:
                    signal.signal(sig, early._note)
                except (ValueError, OSError):  # not the main thread
                    continue
            cls.installed = early
        return cls.installed

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self.reload = True
        else:
            self.stop = signum


def main() -> int:
    """Install the early handlers for ``run``, then hand over to the command line."""
    if sys.argv[1:2] == ["run"]:
        EarlySignals.install()
    from sigwatch.cli import main as cli_main

    return cli_main()
