"""Prefilter: from a chunk of whole lines to the few (line, steps) worth a real regex.

Every step is analysed once (``engine.analysis``): an *anchor* (required literals, the rarest
factor) and a *relaxed* bytes regex that matches the raw line whenever the step can match its
normalised text. Per chunk, all in C:

1. strong anchors: one trie-shaped ``re`` alternation over the chunk, each alternative starting
   at the rarest byte of its literal so the scan only stops on rare bytes; a stop is confirmed
   by comparing the whole literal;
2. weak anchors (common words such as "loss"): either ``find`` each occurrence or run the
   relaxed regex over the chunk, whichever the anchor's count in this chunk says is cheaper;
3. lines holding ESC or NUL (which normalisation removes, joining what was around them) or a
   non-ASCII letter that folds to an ASCII one are cleaned and checked on their own;
4. every (line, step) pair found is confirmed by the step's relaxed regex before any Python
   object is made for the line.

With the optional ``hyperscan`` module (``pip install sigwatch[fast]``) steps 1, 2 and 4 are a
single Hyperscan scan of all relaxed regexes. Both backends give a superset of the lines on
which a step matches, so detections are identical; only the speed differs.

Steps whose regex cannot be analysed are ``forced``: they run on every line.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from sigwatch.engine.analysis import CASE_VARIANTS, StepFilter
from sigwatch.engine.cache import analyze_all, unigram
from sigwatch.patterns.compiled import PatternSet

__all__ = ["BACKENDS", "Prefilter", "StepRef", "hyperscan_available"]

StepRef = tuple[int, int]  # (signature index in the set, step index)
Candidate = tuple[int, int, tuple[StepRef, ...]]  # (line start, newline index, steps)

BACKENDS = ("auto", "python", "hyperscan", "none")
MIN_KEY_BYTES = 4

_SPECIAL_RE = re.compile(b"[\x00\x1b]|" + b"|".join(re.escape(v) for v in CASE_VARIANTS.values()))
_VARIANTS = tuple(CASE_VARIANTS.values())


def _rare_byte(variant: bytes) -> tuple[bytes, bytes, int]:
    # memchr() for one byte is the fast search; a lead byte such as 0xE2 is common in tqdm
    # bars, so look for the variant's last byte when its lead byte is E2.
    k = len(variant) - 1 if variant[0] == 0xE2 else 0
    return variant[k:k + 1], variant, k


_SPECIAL_BYTES = ((b"\x1b", b"", 0), (b"\x00", b"", 0), (b"#033[", b"", 0),
                  *(_rare_byte(v) for v in CASE_VARIANTS.values()))
# Same grammar as framing.normalize.ANSI_RE, on the bytes of one line.
_ANSI_BYTES_RE = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]"
    rb"|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)"
    rb"|\x1b[@-Z\\-_]")
# framing.normalize.SYSLOG_ANSI_RE: colours as rsyslog escapes them ("#033[2m").
_SYSLOG_ANSI_BYTES_RE = re.compile(rb"#033\[[0-?]*[ -/]*[@-~]")


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def _clean(line: bytes) -> bytes:
    if b"\x1b" in line:
        line = _ANSI_BYTES_RE.sub(b"", line)
    if b"#033[" in line:
        line = _SYSLOG_ANSI_BYTES_RE.sub(b"", line)
    if b"\x00" in line:
        line = line.replace(b"\x00", b"")
    return line


def _unigram() -> Counter[int]:
    return Counter({b: n for b, n in enumerate(unigram()) if n})


class _Needle:
    __slots__ = ("ci", "offset", "steps", "text")

    def __init__(self, text: bytes, ci: bool, offset: int, steps: list[StepRef]) -> None:
        self.text = text.lower() if ci else text
        self.ci = ci
        self.offset = offset
        self.steps = steps


def _choose_offsets(needles: list[tuple[bytes, bool]]) -> dict[tuple[bytes, bool], int]:
    """Where each literal's trie key starts: at its rarest byte (the scan stops on it), then
    again for each literal given the bytes the others stop on (those cost no more stops)."""
    freq = _unigram()
    total = max(sum(freq.values()), 1)

    def stops(b: int, ci: bool) -> set[int]:
        return {b | 0x20, b & 0xDF} if ci and 65 <= (b & 0xDF) <= 90 else {b}

    def cost(text: bytes, ci: bool, i: int, others: set[int]) -> tuple[float, int]:
        return (sum(freq.get(x, 0) + 1 for x in stops(text[i], ci) - others) / total, i)

    def best(text: bytes, ci: bool, others: set[int]) -> int:
        last = max(0, len(text) - MIN_KEY_BYTES)
        return min(range(last + 1), key=lambda i: cost(text, ci, i, others))

    starts = [best(text, ci, set()) for text, ci in needles]
    for _round in range(3):
        held: Counter[int] = Counter()
        for (text, ci), i in zip(needles, starts, strict=True):
            held.update(stops(text[i], ci))
        for n, (text, ci) in enumerate(needles):
            mine = stops(text[starts[n]], ci)
            held.subtract(mine)
            starts[n] = best(text, ci, {b for b, c in held.items() if c > 0})
            held.update(stops(text[starts[n]], ci))
    return dict(zip(needles, starts, strict=True))


def _token(b: int, ci: bool) -> bytes:
    if ci and chr(b).isalpha() and b < 128:
        return b"[" + re.escape(bytes([b | 0x20])) + re.escape(bytes([b & 0xDF])) + b"]"
    return re.escape(bytes([b]))


def _trie_regex(keys: Iterable[tuple[bytes, bool]]) -> bytes:
    root: dict[bytes, Any] = {}
    for key, ci in keys:
        first = key[0]
        firsts = [first]
        if ci and chr(first).isalpha() and first < 128:
            firsts = [first | 0x20, first & 0xDF]
        for f in firsts:
            node = root.setdefault(re.escape(bytes([f])), {})
            for b in key[1:]:
                node = node.setdefault(_token(b, ci), {})
            node[b""] = {}

    def emit(node: dict[bytes, Any]) -> bytes:
        alts = [tok + emit(child) for tok, child in sorted(node.items()) if tok]
        if b"" in node or not alts:
            return b""  # a key ends here: the shorter key already decides a stop
        if len(alts) == 1:
            return alts[0]
        return b"(?:" + b"|".join(alts) + b")"

    top = [tok + emit(child) for tok, child in sorted(root.items())]
    return b"|".join(top)


class _PythonScan:
    """The pure-``re`` backend for a subset of the steps."""

    def __init__(self, filters: dict[StepRef, StepFilter],
                 hints: dict[StepRef, str] | None = None) -> None:
        hints = hints or {}
        self.relaxed: dict[StepRef, re.Pattern[bytes]] = {}
        by_needle: dict[tuple[bytes, bool], list[StepRef]] = defaultdict(list)
        # A weak step: (ref, relaxed regex on lowercased bytes, gate). The gate is the
        # alternation of its anchor literals (one of which every match contains): only lines
        # that hold one are given to the relaxed regex, which may be slow to run everywhere.
        self.weak: list[tuple[StepRef, re.Pattern[bytes], re.Pattern[bytes] | None]] = []
        self.hinted = frozenset(hints)
        for ref, f in filters.items():
            if f.relaxed is not None:
                self.relaxed[ref] = re.compile(f.relaxed)
            anchor = tuple((text.encode(), ci) for text, ci in f.anchor)
            if not anchor or f.weak:
                assert f.relaxed_lower is not None
                gate = None
                if ref in hints:  # the signature's own prefregex (case-sensitive)
                    gate = re.compile(hints[ref].encode("utf-8"))
                # A relaxed regex that starts with a literal is found by memchr already.
                elif anchor and not f.led_by_literal:
                    literals = sorted({re.escape(t.lower()) for t, _ci in anchor},
                                      key=len, reverse=True)
                    gate = re.compile(b"|".join(literals))
                self.weak.append((ref, re.compile(f.relaxed_lower), gate))
            else:
                for needle in anchor:
                    by_needle[needle].append(ref)
        # Each gate as passes that start with one literal byte each (``re`` then skips to
        # that byte in C instead of testing every byte of the chunk against the gate's first
        # bytes): the gate's own match is then taken where the byte is.
        self.entries: dict[int, list[re.Pattern[bytes]]] = {
            id(gate): _entries(gate) for _ref, _rx, gate in self.weak if gate is not None}
        offsets = _choose_offsets(list(by_needle))
        self.by_first: dict[int, list[_Needle]] = defaultdict(list)
        keys: list[tuple[bytes, bool]] = []
        for (text, ci), refs in by_needle.items():
            i = offsets[(text, ci)]
            n = _Needle(text, ci, i, sorted(refs))
            key = n.text[i:]
            keys.append((key, ci))
            firsts = {key[0]}
            if ci and chr(key[0]).isalpha():
                firsts = {key[0] | 0x20, key[0] & 0xDF}
            for first_byte in firsts:
                self.by_first[first_byte].append(n)
        self.trie = re.compile(_trie_regex(keys)) if keys else None

    def scan(self, data: bytes, start: int, end: int, out: dict[int, set[StepRef]],
             line_of: Any) -> None:
        """Add (line start -> steps) for ``data[start:end]`` (whole lines)."""
        trie = self.trie
        if trie is not None:
            by_first = self.by_first
            pos = start
            lowered: bytes | None = None
            while True:
                m = trie.search(data, pos, end)
                if m is None:
                    break
                p = m.start()
                for n in by_first[data[p]]:
                    s = p - n.offset
                    if s < start:
                        continue
                    if n.ci:
                        if lowered is None:
                            lowered = data.lower()
                        hit = lowered.startswith(n.text, s)
                    else:
                        hit = data.startswith(n.text, s)
                    if hit:
                        out.setdefault(line_of(data, s, start), set()).update(n.steps)
                pos = p + 1
        if self.weak:
            # Common anchors: the relaxed regex itself, on ASCII-lowercased bytes, where its
            # first letters are a plain literal that ``re`` searches for with memchr.
            low = (data if start == 0 and end == len(data) else data[start:end]).lower()
            for ref, rx, gate in self.weak:
                if gate is None:
                    for m in rx.finditer(low):
                        out.setdefault(line_of(data, start + m.start(), start), set()).add(ref)
                    continue
                # The signature's prefregex is case-sensitive (the original bytes); the anchor
                # gate is lowercase literals (the lowered bytes). Same offsets either way.
                haystack = (data[start:end] if start or end != len(data) else data) \
                    if ref in self.hinted else low
                for entry in self.entries[id(gate)]:
                    pos = 0
                    while True:
                        g = entry.search(haystack, pos)
                        if g is None:
                            break
                        if entry is not gate:
                            g = gate.match(haystack, g.start())  # the gate's match there
                            assert g is not None
                        line_start = low.rfind(b"\n", 0, g.start()) + 1
                        line_end = low.find(b"\n", g.end())
                        if line_end == -1:
                            line_end = len(low)
                        m = rx.search(low, line_start, line_end)
                        if m is not None:
                            out.setdefault(line_of(data, start + m.start(), start),
                                           set()).add(ref)
                        pos = line_end + 1



def _first_bytes(items: list[tuple[Any, Any]]) -> set[int] | None:
    """The bytes a match of the parsed ``items`` can start with (None: any, or unknown)."""
    for op, av in items:
        name = str(op)
        if name == "AT":
            continue  # zero-width (\\b, ^): the next item decides
        if name == "LITERAL":
            return {av}
        if name == "IN":
            found: set[int] = set()
            for iop, iav in av:
                if str(iop) == "LITERAL":
                    found.add(iav)
                elif str(iop) == "RANGE" and iav[1] - iav[0] < 16:
                    found.update(range(iav[0], iav[1] + 1))
                else:
                    return None
            return found
        if name == "BRANCH":
            union: set[int] = set()
            for branch in av[1]:
                sub = _first_bytes(list(branch.data))
                if sub is None:
                    return None
                union |= sub
            return union
        if name == "SUBPATTERN" and av[1] == 0 and av[2] == 0:
            sub = _first_bytes(list(av[3].data))
            if sub is None:
                return None
            if _min_width(av[3]) == 0:
                return None  # an empty group lets the next item start the match
            return sub
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[0] >= 1:
            return _first_bytes(list(av[2].data))
        return None
    return None


def _min_width(sub: Any) -> int:
    try:
        return int(sub.getwidth()[0])
    except (re.error, TypeError, ValueError):  # pragma: no cover - defensive
        return 0


def _entries(gate: re.Pattern[bytes]) -> list[re.Pattern[bytes]]:
    """Passes that find every match of ``gate``, each starting with one literal byte (a
    pass per byte a match can start with), or ``[gate]`` itself when that is not known or
    a single literal already leads it."""
    if gate.flags & (re.IGNORECASE | re.VERBOSE):
        return [gate]
    try:
        tree = re._parser.parse(gate.pattern.decode("latin-1"), 0)
    except (re.error, UnicodeDecodeError):  # pragma: no cover - it compiled once
        return [gate]
    firsts = _first_bytes(list(tree.data))
    if firsts is None or len(firsts) <= 1 or len(firsts) > 6:
        return [gate]
    # "x(?<=(?=GATE).)": the byte x, where the gate matches (a lookahead inside a
    # one-byte lookbehind): a literal prefix for ``re``, the gate's test at each x.
    try:
        return [re.compile(re.escape(bytes((b,))) + b"(?<=(?=(?:" + gate.pattern + b")).)",
                           gate.flags & ~re.UNICODE)
                for b in sorted(firsts) if b != 10]
    except re.error:  # pragma: no cover - a gate with its own inline flags
        return [gate]


def _line_start(data: bytes, pos: int, floor: int) -> int:
    return max(data.rfind(b"\n", floor, pos) + 1, floor)


def _hs_literal(text: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isalnum() and c < 128 else b"\\x%02x" % c for c in text)


class _HyperscanScan:
    """One Hyperscan block-mode database: the strong anchors as literals (caseless where the
    step is), the relaxed regex of the weak and unanchored steps. Candidates are confirmed by
    the relaxed regex afterwards, as with the pure-Python backend."""

    def __init__(self, filters: dict[StepRef, StepFilter]) -> None:
        import hyperscan

        self.refs: list[StepRef] = []
        exprs: list[bytes] = []
        flags: list[int] = []
        self.rejected: dict[StepRef, StepFilter] = {}
        for ref, f in filters.items():
            assert f.relaxed is not None
            if f.anchor and not f.weak:
                for text, ci in f.anchor:
                    exprs.append(_hs_literal(text.encode()))
                    flags.append(hyperscan.HS_FLAG_CASELESS if ci else 0)
                    self.refs.append(ref)
                continue
            try:  # one odd pattern must not cost the others
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                db.compile(expressions=[f.relaxed], ids=[0], elements=1, flags=[0])
            except Exception:  # noqa: BLE001 - hyperscan.error and friends
                self.rejected[ref] = f
                continue
            exprs.append(f.relaxed)
            flags.append(0)
            self.refs.append(ref)
        self.db = None
        if exprs:
            db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            db.compile(expressions=exprs, ids=list(range(len(exprs))),
                       elements=len(exprs), flags=flags)
            self.db = db
            self.scratch = hyperscan.Scratch(db)

    def scan(self, data: bytes, start: int, end: int, out: dict[int, set[StepRef]],
             line_of: Any) -> None:
        if self.db is None:
            return
        refs = self.refs
        hits: list[tuple[int, int]] = []
        append = hits.append

        def on_match(ident: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append((ident, to))

        view = data if (start == 0 and end == len(data)) else data[start:end]
        self.db.scan(view, match_event_handler=on_match, scratch=self.scratch)
        for ident, to in hits:
            line = line_of(data, start + max(to - 1, 0), start)
            out.setdefault(line, set()).add(refs[ident])



class Prefilter:
    """Candidate lines and steps for one PatternSet."""

    def __init__(self, patterns: PatternSet, backend: str | None = None) -> None:
        if backend is None:
            backend = os.environ.get("SIGWATCH_PREFILTER", "auto")
        if backend not in BACKENDS:
            raise ValueError(f"unknown prefilter backend {backend!r}; one of {BACKENDS}")
        self.all_steps: tuple[StepRef, ...] = tuple(
            (si, k) for si, sig in enumerate(patterns.signatures) for k in range(len(sig.steps)))
        analysed = analyze_all(patterns.signatures[si].steps[k].source
                               for si, k in self.all_steps)
        filters = {(si, k): analysed[patterns.signatures[si].steps[k].source]
                   for si, k in self.all_steps}
        self.filters = filters
        if backend == "none":
            forced = list(self.all_steps)
        else:
            forced = [ref for ref, f in filters.items() if f.relaxed is None]
        self.forced: tuple[StepRef, ...] = tuple(forced)
        analysable = {ref: f for ref, f in filters.items() if ref not in set(forced)}
        if backend == "auto":
            backend = "hyperscan" if hyperscan_available() else "python"
        elif backend == "hyperscan" and not hyperscan_available():
            raise ValueError("prefilter 'hyperscan' needs the hyperscan module: "
                             "pip install 'sigwatch[fast]'")
        self.backend = backend
        self._scanners: list[Any] = []
        if backend == "hyperscan" and analysable:
            hs = _HyperscanScan(analysable)
            self._scanners.append(hs)
            if hs.rejected:
                self._scanners.append(_PythonScan(hs.rejected))
        elif analysable and backend != "none":
            hints = {(si, k): step.prefregex
                     for si, sig in enumerate(patterns.signatures)
                     for k, step in enumerate(sig.steps) if step.prefregex}
            self._scanners.append(_PythonScan(analysable, hints))
        self._relaxed: dict[StepRef, re.Pattern[bytes]] = {
            ref: re.compile(f.relaxed) for ref, f in analysable.items() if f.relaxed}
        self._ci_steps = tuple(ref for ref, f in analysable.items()
                               if any(ci for _t, ci in f.anchor))

    def _special(self, data: bytes, found: dict[int, set[StepRef]],
                 out: list[Candidate]) -> None:
        """Lines normalisation changes in ways that can join or hide literals.

        ESC and NUL lines are cleaned the way ``normalize`` cleans them, then scanned again
        (all such lines of the chunk in one batch); a line holding a non-ASCII letter that
        folds to an ASCII one is a candidate for every caseless step.
        """
        found_starts: set[int] = set()
        for byte, variant, back in _SPECIAL_BYTES:
            if variant and not self._ci_steps:
                continue
            p = data.find(byte)
            while p != -1:
                if variant and not data.startswith(variant, p - back):
                    p = data.find(byte, p + 1)
                    continue
                s = data.rfind(b"\n", 0, p) + 1
                found_starts.add(s)
                nl = data.find(b"\n", p)
                if nl == -1:
                    break
                p = data.find(byte, nl + 1)
        if not found_starts:
            return
        starts = sorted(found_starts)
        cleaned: list[bytes] = []
        raws: list[tuple[int, int, bytes]] = []
        for s in starts:
            nl = data.find(b"\n", s)
            if nl == -1:
                nl = len(data)
            raw = data[s:nl]
            raws.append((s, nl, raw))
            cleaned.append(_clean(raw))
        batch = b"\n".join(cleaned) + b"\n"
        index: dict[int, int] = {}
        pos = 0
        for k, line in enumerate(cleaned):
            index[pos] = k
            pos += len(line) + 1
        hits: dict[int, set[StepRef]] = {}
        for scanner in self._scanners:
            scanner.scan(batch, 0, len(batch), hits, _line_start)
        relaxed = self._relaxed
        wanted: dict[int, set[StepRef]] = {index[bpos]: steps for bpos, steps in hits.items()}
        for k, (s, _nl, raw) in enumerate(raws):
            found.pop(s, None)
            if self._ci_steps and any(v in raw for v in _VARIANTS):
                wanted.setdefault(k, set()).update(self._ci_steps)
        for k, steps in wanted.items():
            s, nl, _raw = raws[k]
            line = cleaned[k]
            keep = [r for r in steps if relaxed[r].search(line) is not None]
            if keep:
                out.append((s, nl, tuple(sorted(keep))))

    @property
    def filters_everything(self) -> bool:
        """True when every step is prefiltered, so non-candidate lines can be skipped."""
        return not self.forced

    def candidates(self, data: bytes) -> list[Candidate]:
        """``(start, newline, steps)`` of each line of ``data`` some step may match, in order.

        ``data`` is whole lines, each ending with a newline. Forced steps are not included.
        """
        found: dict[int, set[StepRef]] = {}
        end = len(data)
        for scanner in self._scanners:
            scanner.scan(data, 0, end, found, _line_start)
        out: list[Candidate] = []
        relaxed = self._relaxed
        if self._scanners:
            self._special(data, found, out)
        for s, refs in found.items():
            nl = data.find(b"\n", s)
            if nl == -1:
                nl = end
            keep = [r for r in refs if relaxed[r].search(data, s, nl) is not None]
            if keep:
                out.append((s, nl, tuple(sorted(keep))))
        out.sort()
        return out
