"""``python -m sigwatch``: the same entry point as the ``sigwatch`` command."""

from __future__ import annotations

import sys

from sigwatch.entry import main

sys.exit(main())
