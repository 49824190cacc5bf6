"""How long after exec a SIGHUP still kills ``sigwatch run`` (issue 25: the early handler).

Two measures, each beside its peers in the same run:

* **window**: the time from exec (``Popen`` returning) until the process has a SIGHUP handler
  (``SigCgt`` in ``/proc/PID/status``, polled in a tight loop), over ``--runs`` starts;
* **sweep**: SIGHUP sent at increasing delays after exec; how many of ``--runs`` processes
  survived it.

Rows: ``python -c`` installing a handler as its very first statement (the floor: the
interpreter's own start-up, which no entry point can shorten), the ``sigwatch`` console script
and ``python -m sigwatch`` (the entry point now), and the placement before the fix (the
handler installed by ``sigwatch.cli.main``, after the command line's imports). The program run
is ``run --help``: the same start-up path up to the argument parser, without building a
daemon, so a run costs a fraction of a second.

Usage: bench/early_signals.py [--runs 20] [--delays 0,5,10,20,40,80,160]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HUP = 1 << (signal.SIGHUP - 1)

FLOOR = ("import signal, time; signal.signal(signal.SIGHUP, lambda *a: None); "
         "time.sleep(0.2); print('done')")
BEFORE = ("import sys; from sigwatch.cli import main; "
          "sys.argv = ['sigwatch', 'run', '--help']; sys.exit(main())")


def _programs() -> dict[str, list[str]]:
    script = shutil.which("sigwatch", path=str(Path(sys.executable).parent))
    rows = {"interpreter floor (python -c, handler first)": [sys.executable, "-c", FLOOR]}
    if script:
        rows["sigwatch run (console script)"] = [script, "run", "--help"]
    rows["python -m sigwatch run"] = [sys.executable, "-m", "sigwatch", "run", "--help"]
    rows["before the fix (handler in cli.main)"] = [sys.executable, "-c", BEFORE]
    return rows


def _caught(pid: int) -> bool | None:
    """Whether ``pid`` catches SIGHUP now (None: it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & HUP)
    except FileNotFoundError:
        return None
    return False


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def window(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Milliseconds from exec to the SIGHUP handler, per run."""
    out: list[float] = []
    for _ in range(runs):
        proc = _spawn(argv, env)
        started = time.monotonic()
        while True:
            state = _caught(proc.pid)
            if state is None or proc.poll() is not None:
                break
            if state:
                out.append((time.monotonic() - started) * 1000)
                break
        proc.kill()
        proc.communicate()
    return out


def sweep(argv: list[str], env: dict[str, str], runs: int, delay_ms: float) -> int:
    """How many of ``runs`` processes survive a SIGHUP ``delay_ms`` after exec.

    A process that printed its output (the help, the floor's "done") had finished its work:
    a SIGHUP during the interpreter's exit (which restores the default handlers) ends it,
    and that is not a start-up death."""
    survived = 0
    for _ in range(runs):
        proc = _spawn(argv, env)
        if delay_ms:
            time.sleep(delay_ms / 1000)  # the experiment: a signal at this moment
        proc.send_signal(signal.SIGHUP)
        out, _err = proc.communicate()
        survived += proc.returncode != -signal.SIGHUP or bool(out)
    return survived


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--delays", default="0,5,10,20,40,80,160",
                        help="milliseconds after exec, comma-separated")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "daemon"))
    delays = [float(x) for x in args.delays.split(",")]
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load:.2f}; {args.runs} runs per cell\n")
    print("| program | handler after exec, median ms | p90 ms | max ms |")
    print("|---|---:|---:|---:|")
    programs = _programs()
    for name, argv in programs.items():
        times = sorted(window(argv, env, args.runs))
        if not times:
            print(f"| {name} | n/a | n/a | n/a |")
            continue
        p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
        print(f"| {name} | {statistics.median(times):.1f} | {p90:.1f} | {times[-1]:.1f} |",
              flush=True)
    print("\nSIGHUP sent this long after exec: processes that survived it\n")
    print("| program | " + " | ".join(f"{d:g} ms" for d in delays) + " |")
    print("|---|" + "---:|" * len(delays))
    for name, argv in programs.items():
        cells = [f"{sweep(argv, env, args.runs, d)}/{args.runs}" for d in delays]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
