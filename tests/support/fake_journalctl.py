"""A stand-in for ``journalctl -o json --follow`` that plays a recorded journal.

The "journal" is ``<directory>/journal.jsonl``: one ``journalctl -o json`` entry per line, as
journalctl prints them. It honours the arguments ``JournalSource`` passes: ``--directory``,
``--after-cursor`` (entries whose ``i=`` sequence number is above the cursor's, like the real
seek, so a vacuumed cursor entry skips nothing), ``--since=@EPOCH``, ``--lines=0``, ``--unit``,
``--identifier`` and ``FIELD=value`` matches; ``--follow`` keeps printing what is appended.
Each run appends its argument vector to ``<directory>/argv.log`` for the tests to check.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def _seqnum(cursor: str) -> int:
    for part in cursor.split(";"):
        if part.startswith("i="):
            return int(part.split("=", 1)[1], 16)
    raise SystemExit(f"Failed to seek to cursor: Invalid argument ({cursor})")


def main(argv: list[str]) -> int:
    directory = Path(".")
    after: int | None = None
    since: float | None = None
    tail_only = False
    follow = False
    units: list[str] = []
    idents: list[str] = []
    matches: list[tuple[str, str]] = []
    for arg in argv:
        if arg.startswith("--directory="):
            directory = Path(arg.split("=", 1)[1])
        elif arg.startswith("--after-cursor="):
            after = _seqnum(arg.split("=", 1)[1])
        elif arg.startswith("--since=@"):
            since = float(arg.split("@", 1)[1])
        elif arg == "--lines=0":
            tail_only = True
        elif arg == "--follow":
            follow = True
        elif arg.startswith("--unit="):
            units.append(arg.split("=", 1)[1])
        elif arg.startswith("--identifier="):
            idents.append(arg.split("=", 1)[1])
        elif "=" in arg and not arg.startswith("-"):
            key, value = arg.split("=", 1)
            matches.append((key, value))
    with (directory / "argv.log").open("a") as log:
        log.write(json.dumps(argv) + "\n")
    journal = directory / "journal.jsonl"

    def wanted(entry: dict[str, object]) -> bool:
        if units and entry.get("_SYSTEMD_UNIT") not in units:
            return False
        if idents and entry.get("SYSLOG_IDENTIFIER") not in idents:
            return False
        if any(entry.get(k) != v for k, v in matches):
            return False
        if after is not None and _seqnum(str(entry["__CURSOR"])) <= after:
            return False
        return not (since is not None and int(str(entry["__REALTIME_TIMESTAMP"])) / 1e6 < since)

    done = 0
    first = True
    while True:
        lines = journal.read_text().splitlines() if journal.exists() else []
        fresh = lines[done:]
        done = len(lines)
        if first and tail_only:
            fresh = []
        first = False
        for line in fresh:
            entry = json.loads(line)
            if wanted(entry):
                sys.stdout.write(json.dumps(entry) + "\n")
        sys.stdout.flush()
        if not follow:
            return 0
        if (directory / "exit").exists():
            (directory / "exit").unlink()
            sys.stderr.write("Journal file was rotated away, exiting.\n")
            return 1
        time.sleep(0.02)  # the player's own follow loop; the tests never sleep


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
