"""The generic layer: failures caught by their shape, whatever their wording (issue 20).

Five shapes, each a detection of its own, ranked below the signature library:

- ``generic_traceback``: a Python traceback that ends a process, a rank or a thread, whatever
  the exception class, chained or wrapped by a launcher; it names the exception and the
  innermost frame of the user's code (``tracebacks.py``);
- ``generic_native_crash``: a fatal signal or an abort as shells, the C runtime, glog/absl,
  faulthandler, the Go and Rust runtimes and launchers print it (``native.py``);
- ``generic_error_record``: an error- or fatal-level record in a log format training stacks
  use, classified by component, its message masked into a template, a documented vendor code
  named with its meaning (``records.py``, ``codes.py``);
- ``generic_failed_check``: a diagnostic reporting a failed check (``checks.py``);
- ``generic_blocked_stack``: a dump of a live process's stacks (py-spy's, faulthandler's) with
  a thread blocked in a collective, or the main thread waiting on its peers or children: the
  hang someone (or a watchdog) dumped it for (``tracebacks.py``).

``GenericDetector`` (``detector.py``) reads them all in one per-chunk detector.
"""

from __future__ import annotations

from sigwatch.detectors.generic.codes import CodeTable
from sigwatch.detectors.generic.detector import GENERIC_SIGNATURES, SHAPES, GenericDetector

__all__ = ["GENERIC_SIGNATURES", "SHAPES", "CodeTable", "GenericDetector"]
