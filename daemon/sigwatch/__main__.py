"""``python -m sigwatch``."""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["run"]:  # first thing: SIGHUP during start-up must not kill the daemon
    from sigwatch.process import EarlySignals

    EarlySignals.install()

from sigwatch.cli import main

sys.exit(main())
