"""``python -m sigwatch``."""

from __future__ import annotations

import sys

from sigwatch.cli import main

sys.exit(main())
