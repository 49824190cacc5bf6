"""``sigwatch templates``: the miner's template for every line of some files.

Two passes, like the benchmark scoring: the miner first learns every line of every file, then
each line is printed with the final template of its group (the template a group ends with is
what anyone scoring the miner compares against). Leading timestamps are stripped before mining,
as the daemon does; ANSI colour codes are removed.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator, Sequence
from typing import TextIO

from sigwatch.detectors.templates import TemplateMiner
from sigwatch.errors import InputError
from sigwatch.framing.normalize import ANSI_RE

__all__ = ["print_templates"]


def _lines(name: str) -> list[str]:
    try:
        if name == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(name, "rb") as fh:
                data = fh.read()
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror}") from None
    text = data.decode("utf-8", "replace")
    return [ANSI_RE.sub("", line.rstrip("\r")) for line in text.split("\n")[:-1]
            + ([text.rsplit("\n", 1)[-1]] if not text.endswith("\n") and text else [])]


def _rows(files: Sequence[str], miner: TemplateMiner) -> Iterator[tuple[str, int, int, str]]:
    per_file = [(name, _lines(name)) for name in files]
    first_ids = [[miner.add(line).template_id for line in lines] for _, lines in per_file]
    for (name, lines), ids in zip(per_file, first_ids, strict=True):
        for lineno, (line, first) in enumerate(zip(lines, ids, strict=True), start=1):
            tpl = miner.match(line)
            if tpl is None:  # its group was evicted (more than max_templates groups)
                yield name, lineno, first, " ".join(miner.tokens(line))
            else:
                yield name, lineno, tpl.id, tpl.text


def print_templates(files: Sequence[str], out: TextIO, *, fmt: str = "text") -> int:
    """Print ``template_id<TAB>template`` (text) or ``file,line,template_id,template`` (csv)."""
    miner = TemplateMiner(header=True)
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["file", "line", "template_id", "template"])
        for name, lineno, tid, text in _rows(files, miner):
            writer.writerow([name, lineno, tid, text])
    else:
        for _name, _lineno, tid, text in _rows(files, miner):
            out.write(f"T{tid}\t{text}\n")
    return 0
