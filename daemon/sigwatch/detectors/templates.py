"""Online template mining and the ``novel_error`` detector.

``TemplateMiner`` gives every line a template: the line with its variable parts (numbers, hex,
ids, addresses, paths) replaced by ``<*>``. It is a Drain-style fixed-depth parse tree (He et al.,
ICWS 2017): lines are routed by token count and their first tokens to a small leaf, and joined to
the most similar template there. Differences from Drain3 that matter for accuracy:

- tokens are masked before mining by *shape* (any token holding a digit, hex runs, paths,
  quoted keys of ``key=value`` keep their key), so routing and similarity see the constant words;
- similarity ignores positions that are variables on both sides, so a template made mostly of
  parameters is not pushed below the threshold by its own wildcards;
- a leaf also merges templates that became identical after generalisation.

State is a plain JSON-able dict (``snapshot``/``restore``): a restart does not re-learn the world.
Memory is bounded: at most ``max_templates`` templates (least recently used are evicted) plus a
bounded set of hashes of every template ever seen, so an evicted template that comes back is not
"novel".

``NovelErrorDetector`` turns the miner into a detector: an error-looking line whose template was
never seen on this node, after a learning period, is a ``novel_error`` warning.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sigwatch.clock import Clock
from sigwatch.detectors.base import LineEvent, StreamContext
from sigwatch.detectors.progress import literal_interest
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = [
    "ERROR_INTEREST",
    "ERROR_LITERALS",
    "NOVEL_ERROR",
    "SHAPE_LITERALS",
    "Mined",
    "NovelErrorDetector",
    "Template",
    "TemplateMiner",
    "looks_like_error",
    "mask_tokens",
    "strip_header",
]

WILDCARD = "<*>"

# -- line preparation --------------------------------------------------------------------------

_HEADER_RE = re.compile(
    r"^\s*(?:"
    # ISO / syslog / bracketed timestamps, optionally followed by more of the same
    r"(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?[ \t]*)"
    r"|(?:\[?[A-Z][a-z]{2} {1,2}\d{1,2} \d{2}:\d{2}:\d{2}\]?[ \t]*)"
    r"|(?:\[\s*\d+\.\d+\][ \t]*)"  # kernel [  12.345678]
    r")+")

_TOKEN_SPLIT_RE = re.compile(r"[\s]+")
_HAS_DIGIT_RE = re.compile(r"\d")
_HEXISH_RE = re.compile(r"^(?:0x)?[0-9a-fA-F]{8,}$")
_PATH_RE = re.compile(r"^(?:[A-Za-z]:)?(?:/[^/\s]*){2,}|^[A-Za-z]:\\")
_URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*://")
_KEY_VALUE_RE = re.compile(r"^([A-Za-z_][\w\-]*[=:])(.+)$")
# punctuation split off tokens so "uid=0," and "(uid=0)" route like "uid=<*>"
_EDGE_PUNCT = "()[]{},;\"'"


def strip_header(text: str) -> str:
    """Drop a leading timestamp (ISO, syslog, kernel) so the message routes by its first word."""
    m = _HEADER_RE.match(text)
    return text[m.end():] if m else text


def _mask_token(tok: str) -> str:
    """One token: the token itself, ``<*>``, or ``key=<*>`` for a ``key=value`` pair."""
    if not _HAS_DIGIT_RE.search(tok):
        core = tok.strip(_EDGE_PUNCT)
        if not (_PATH_RE.match(core) or _URL_RE.match(core)
                or (len(core) >= 16 and _HEXISH_RE.match(core))):
            return tok
    kv = _KEY_VALUE_RE.match(tok)
    if kv and not _HAS_DIGIT_RE.search(kv.group(1)):
        return kv.group(1) + WILDCARD
    head = tok.lstrip(_EDGE_PUNCT)
    tail = tok.rstrip(_EDGE_PUNCT)
    lead = tok[: len(tok) - len(head)]
    trail = tok[len(tail):] if len(tail) > len(lead) else ""
    return f"{lead}{WILDCARD}{trail}"


_ASIDE_RE = re.compile(r"\s*\((?:[^()]*\d[^()]*)?\)")
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?"
_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_DATE_RE = re.compile(
    rf"\b(?:{_DAY}\s+)?{_MON}\s+\d{{1,2}}(?:\s+\d{{1,2}}:\d{{2}}(?::\d{{2}})?)?(?:\s+\d{{4}})?\b"
    r"|\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)?\b")


def mask_tokens(text: str) -> list[str]:
    """Split a message on whitespace and mask its variable-looking tokens."""
    text = _DATE_RE.sub(WILDCARD, text)
    if "(" in text:
        text = _ASIDE_RE.sub("", text)
    return [_mask_token(t) for t in _TOKEN_SPLIT_RE.split(text.strip()) if t]


# -- the miner ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Template:
    """One group of lines: its id (stable for the life of the state) and current tokens."""

    id: int
    tokens: list[str]
    path: tuple[str, ...]
    size: int = 1
    wild: int = field(default=0)

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    def recount(self) -> None:
        self.wild = sum(1 for t in self.tokens if WILDCARD in t)


@dataclass(frozen=True, slots=True)
class Mined:
    """What ``TemplateMiner.add`` did with one line."""

    template_id: int
    template: str
    created: bool
    seen_before: bool  # the template (or one with the same creation shape) existed before


class TemplateMiner:
    """A Drain-style online miner with bounded memory and JSON-able state."""

    def __init__(
        self,
        *,
        similarity: float = 0.7,
        depth: int = 5,
        max_children: int = 100,
        max_templates: int = 5000,
        max_seen: int = 100_000,
        header: bool = False,
    ) -> None:
        """``header``: strip a leading timestamp before mining (raw log lines)."""
        if depth < 3:
            raise ValueError("depth must be at least 3")
        self.similarity = similarity
        self.prefix_tokens = depth - 3  # Drain: root, length layer, prefix tokens, leaf
        self.max_children = max_children
        self.max_templates = max_templates
        self.max_seen = max_seen
        self.header = header
        self._next_id = 1
        self._templates: OrderedDict[int, Template] = OrderedDict()  # LRU order
        self._leaves: dict[tuple[str, ...], list[Template]] = {}
        self._children: dict[tuple[str, ...], set[str]] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._templates)

    # -- public API -------------------------------------------------------------------------

    def tokens(self, text: str) -> list[str]:
        """The masked tokens the miner works on for ``text``."""
        if self.header:
            text = strip_header(text)
        return mask_tokens(text)

    def add(self, text: str) -> Mined:
        """Learn one line; return its template (created or existing)."""
        toks = self.tokens(text)
        path = self._route(toks, learn=True)
        leaf = self._leaves.setdefault(path, [])
        best = self._best(leaf, toks)
        if best is not None:
            changed = self._generalise(best, toks)
            best.size += 1
            self._templates.move_to_end(best.id)
            if changed:
                best = self._dedupe(leaf, best)
            return Mined(best.id, best.text, created=False, seen_before=True)
        shape = _shape_key(toks)
        seen = shape in self._seen
        tpl = Template(self._next_id, list(toks), path)
        tpl.recount()
        self._next_id += 1
        leaf.append(tpl)
        self._templates[tpl.id] = tpl
        self._remember(shape)
        self._evict()
        return Mined(tpl.id, tpl.text, created=True, seen_before=seen)

    def match(self, text: str) -> Template | None:
        """The template ``text`` would join, learning nothing."""
        toks = self.tokens(text)
        path = self._route(toks, learn=False)
        return self._best(self._leaves.get(path, []), toks)

    def templates(self) -> list[Template]:
        return list(self._templates.values())

    # -- state ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state (templates with their tree paths, the seen-hashes)."""
        return {
            "version": 1,
            "next_id": self._next_id,
            "templates": [[t.id, t.tokens, list(t.path), t.size] for t in self._templates.values()],
            "seen": list(self._seen),
        }

    def restore(self, state: object) -> None:
        """Rebuild from ``snapshot``; unknown or malformed state is ignored (fresh start)."""
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        self._templates.clear()
        self._leaves.clear()
        self._children.clear()
        self._seen.clear()
        for tid, toks, path, size in state.get("templates", []):
            tpl = Template(int(tid), [str(t) for t in toks], tuple(str(p) for p in path),
                           int(size))
            tpl.recount()
            self._templates[tpl.id] = tpl
            self._leaves.setdefault(tpl.path, []).append(tpl)
            for depth in range(1, len(tpl.path)):
                self._children.setdefault(tpl.path[:depth], set()).add(tpl.path[depth])
        for key in state.get("seen", []):
            self._seen[str(key)] = None
        self._next_id = max(int(state.get("next_id", 1)), max(self._templates, default=0) + 1)

    # -- internals --------------------------------------------------------------------------

    def _route(self, toks: Sequence[str], *, learn: bool) -> tuple[str, ...]:
        path: tuple[str, ...] = (str(len(toks)),)
        for tok in toks[: min(self.prefix_tokens, len(toks) - 1)]:
            key = WILDCARD if WILDCARD in tok else tok
            kids = self._children.get(path)
            if kids is None:
                if not learn:
                    return (*path, key)
                kids = self._children.setdefault(path, set())
            if key not in kids:
                if len(kids) >= self.max_children:
                    key = WILDCARD
                if learn:
                    kids.add(key)
            path = (*path, key)
        return path

    def _best(self, leaf: Iterable[Template], toks: Sequence[str]) -> Template | None:
        best: Template | None = None
        best_key = (-1.0, -1)
        n = len(toks)
        for tpl in leaf:
            equal = 0
            both_wild = 0
            for a, b in zip(tpl.tokens, toks, strict=True):
                if a == b:
                    if WILDCARD in a:
                        both_wild += 1
                    else:
                        equal += 1
            informative = n - both_wild
            sim = 1.0 if informative == 0 else equal / informative
            key = (sim, tpl.wild)
            if key > best_key:
                best, best_key = tpl, key
        if best is None or best_key[0] < self.similarity:
            return None
        return best

    @staticmethod
    def _generalise(tpl: Template, toks: Sequence[str]) -> bool:
        changed = False
        for i, (a, b) in enumerate(zip(tpl.tokens, toks, strict=True)):
            if a not in (b, WILDCARD):
                tpl.tokens[i] = WILDCARD
                changed = True
        if changed:
            tpl.recount()
        return changed

    def _dedupe(self, leaf: list[Template], tpl: Template) -> Template:
        """Merge ``tpl`` into an older template of the leaf that now reads the same."""
        for other in leaf:
            if other is not tpl and other.tokens == tpl.tokens:
                keep, drop = (other, tpl) if other.id < tpl.id else (tpl, other)
                keep.size += drop.size
                leaf.remove(drop)
                del self._templates[drop.id]
                return keep
        return tpl

    def _remember(self, shape: str) -> None:
        self._seen[shape] = None
        self._seen.move_to_end(shape)
        while len(self._seen) > self.max_seen:
            self._seen.popitem(last=False)

    def _evict(self) -> None:
        while len(self._templates) > self.max_templates:
            _tid, old = self._templates.popitem(last=False)
            leaf = self._leaves.get(old.path)
            if leaf is not None:
                leaf.remove(old)
                if not leaf:
                    del self._leaves[old.path]


def _shape_key(toks: Sequence[str]) -> str:
    return hashlib.blake2b(" ".join(toks).encode(), digest_size=8).hexdigest()


# -- error-looking lines ------------------------------------------------------------------------

# Lower-case literals; a line holding one (in any case) is a candidate. The bytes regex is built
# as a trie whose alternatives start with a literal byte, so ``re`` skips from candidate byte to
# candidate byte in C (a plain case-insensitive alternation is ~8x slower, see bench/miner_cost).
ERROR_LITERALS: tuple[bytes, ...] = (
    b"error", b"fail", b"fatal", b"exception", b"traceback", b"panic", b"abort", b"segfault",
    b"segmentation fault", b"killed", b"denied", b"refused", b"timed out", b"timeout",
    b"critical", b"unable to", b"cannot", b"could not", b"invalid", b"corrupt",
    b"out of memory", b"core dumped", b"non-zero", b"exit code", b"exit status", b"exited with",
)


# Words the generic layer's shapes start on beyond the error words (``detectors/generic``:
# signals, ``StopIteration``, diagnostics' ``Pending : Yes`` or ``#wrong``, a test harness's
# banner...). They join the same trie: the runtime's interest pass then has one alternation for
# both detectors (two tries side by side cost twice the scan). The miner still learns only from
# lines ``looks_like_error`` accepts, so they change nothing for it.
SHAPE_LITERALS: tuple[bytes, ...] = (
    b"stopiteration", b"systemexit", b"keyboardinterrupt", b"errupt", b"ault", b"illegal ",
    b"trace/breakpoint", b"trace trap", b"terminate", b"signal", b"sigsegv", b"sigabrt",
    b"sigkill", b"sigbus", b"sigfpe", b"sigill", b"sigtrap", b"sigsys", b"exitcode",
    b"exit_code", b"return code", b"returncode", b"code=dumped", b"stack smashing",
    b"pure virtual", b"crashloopbackoff", b"segfault at", b"general protection",
    b"divide error", b"invalid opcode", b"pending", b"remapping", b"reset required",
    b"drain and reset", b"err!", b"rong ", b"alarm", b"ealth status", b"emergency_warn",
    b"important_warn", b"eneral_warn", b"session starts", b"captured std", b"captured log",
    b'ile "', b"exhausted", b"deadline_exceeded", b"already_exists", b"out_of_range",
    b"data_loss", b"ccl_e_", b"err0", b"err1", b"err2", b"err3", b"err4", b"err5", b"err6",
    b"err7", b"err8", b"err9", b"fi_getinfo: -", b": <inactive>", b"iot instruction",
    # zh_CN signal reports (glibc strsignal, bash jobs.c): segfault, bus error, FPE, illegal
    # instruction, aborted, killed, core dumped
    "段错误".encode(), "总线错误".encode(), "浮点数".encode(), "非法指令".encode(),
    "非法的指令".encode(), "已放弃".encode(), "已杀死".encode(), "核心已转储".encode(),
)

ERROR_INTEREST: re.Pattern[bytes] = re.compile(literal_interest(ERROR_LITERALS + SHAPE_LITERALS))

_ERROR_RE = re.compile(
    r"(?i)\b(?:errors?|fatal|failed|failures?|fails?|failing|exception|traceback|panic|"
    r"abort(?:ed|ing)?|segfault|segmentation fault|killed|denied|refused|timed out|timeout|"
    r"critical|unable to|cannot|could not|invalid|corrupt(?:ed|ion)?|out of memory|"
    r"core dumped)\b"
    r"|\*ERROR\*|[a-z](?:Error|Exception)\b"
    r"|(?i:exit(?:ed)? (?:with )?(?:code|status)|exitcode)[ :=]*-?[1-9]"
    r"|(?i:non-zero (?:exit|status)|returned non-zero)")
# Phrases that carry error words but report that nothing went wrong.
_BENIGN_RE = re.compile(
    r"(?i)\b(?:no|0|zero|without|ignore[sd]?)\s+(?:errors?|failures?|exceptions?)\b"
    r"|\b(?:errors?|failures?|failed|fail)\s*[:=]\s*0\b"
    # Bounded runs around the word: an unbounded [\w.-]* was quadratic on a long word (a
    # 60 KB run of letters after "FATAL" held the GIL for minutes: no reading, no HTTP).
    r"|[\w.-]{0,64}(?:error|fail|timeout)[\w.-]{0,64}\s*[:=]\s*(?:false|none|null|off|0)\b")


# An explicit low level (logging, logrus, glog, NCCL) says the writer did not mean an error.
_LOW_LEVEL_RE = re.compile(
    r"\b(?:INFO|DEBUG|TRACE|NOTICE)\b|\blevel=(?:info|debug|trace)\b|^[ID]\d{4} \d\d:"
    r"|^# (?:HELP|TYPE) ")


_LAST: list[Any] = [None, False]  # the last text asked and its answer (two detectors ask)


def looks_like_error(text: str) -> bool:
    """True when a line reads like an error report, not just a line holding an error word."""
    if text is _LAST[0]:
        return bool(_LAST[1])
    found = _looks_like_error(text)
    _LAST[0], _LAST[1] = text, found
    return found


def _looks_like_error(text: str) -> bool:
    # The level first: it is the cheaper search, and most lines it rejects say INFO.
    if _LOW_LEVEL_RE.search(text) is not None or _ERROR_RE.search(text) is None:
        return False
    if _BENIGN_RE.search(text) is None:
        return True
    return _ERROR_RE.search(_BENIGN_RE.sub(" ", text)) is not None


# -- the detector --------------------------------------------------------------------------------

NOVEL_ERROR = "novel_error"
_REMEDIATION = Remediation(
    summary="A line that reads like an error, of a kind never seen on this node and matched by "
            "no known signature.",
    steps=(
        "Read the line and the lines around it in the log: is the job affected?",
        ("If it is a real failure mode, write a signature for it (patterns/AUTHORING.md) so the "
        "next occurrence is recognised with its fix."),
    ),
    action="investigate",
)


class NovelErrorDetector:
    """``novel_error``: an error-looking line whose template this node has never seen.

    The miner learns from the lines ``interest`` selects (error-looking ones), so its cost is
    paid on a few percent of lines; normal progress chatter never reaches it. Nothing fires
    during the learning period: until ``learn_lines`` interest lines were mined or
    ``learn_seconds`` passed (monotonic, counted across restarts through ``snapshot``). A line
    that a known signature matched is learned but never reported. Each template fires at most
    once (its id is remembered for ``cooldown`` seconds even if it is evicted and re-created),
    and at most ``max_per_hour`` detections are made per hour in total.
    """

    name = NOVEL_ERROR
    line_time = False  # it never reads a line's own time (detectors.base)
    # A line no signature matched is only mined when it reads like an error (detectors.base).
    unmatched_gate = staticmethod(looks_like_error)

    def __init__(
        self,
        clock: Clock,
        *,
        miner: TemplateMiner | None = None,
        learn_lines: int = 2000,
        learn_seconds: float = 6 * 3600.0,
        cooldown: float = 24 * 3600.0,
        max_per_hour: int = 20,
        status: str = "stable",
        host: str = "",
        metrics: SelfMetrics | None = None,
    ) -> None:
        self.clock = clock
        self.miner = miner if miner is not None else TemplateMiner(header=True)
        self.learn_lines = learn_lines
        self.learn_seconds = learn_seconds
        self.cooldown = cooldown
        self.max_per_hour = max_per_hour
        self.status = status
        self.host = host
        self.metrics = metrics
        self._mined = 0
        self._learned_before = 0.0  # learning seconds carried over from before a restart
        self._started = clock.monotonic()
        self._fired: dict[str, float] = {}  # shape hash -> monotonic time it fired
        self._recent: list[float] = []  # monotonic times of recent detections (hour budget)
        self.suppressed = 0

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        return ERROR_INTEREST

    @property
    def learning(self) -> bool:
        elapsed = self._learned_before + self.clock.monotonic() - self._started
        return self._mined < self.learn_lines and elapsed < self.learn_seconds

    def on_open(self, stream: StreamContext) -> None:
        return None

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        return ()

    def next_deadline(self) -> float | None:
        return None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        return ()

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        text = event.line.text
        if not looks_like_error(text):
            return ()
        learning = self.learning
        mined = self.miner.add(text)
        self._mined += 1
        if (not mined.created or mined.seen_before or learning or event.replaying
                or event.matches):
            return ()
        now = self.clock.monotonic()
        shape = _shape_key(self.miner.tokens(text))
        fired_at = self._fired.get(shape)
        if fired_at is not None and now - fired_at < self.cooldown:
            return ()
        self._recent = [t for t in self._recent if now - t < 3600.0]
        if len(self._recent) >= self.max_per_hour:
            self.suppressed += 1
            return ()
        self._recent.append(now)
        self._fired[shape] = now
        if len(self._fired) > 10_000:
            oldest = min(self._fired, key=self._fired.__getitem__)
            del self._fired[oldest]
        info = event.stream.info
        if self.metrics is not None:
            self.metrics.novel_errors.labels(info.source).inc()
        line = event.line
        return (Detection(
            signature=NOVEL_ERROR, title="New Kind Of Error Line", severity=Severity.WARNING,
            status=self.status, source=info.source, path=info.path, stream_key=info.key,
            line=line.lineno, offset=line.offset, text=text, time=self.clock.time(),
            remediation=_REMEDIATION, rank=line.rank, host=self.host,
            captures=(("template", mined.template),),
            facts=(("template", mined.template), ("template_id", str(mined.template_id)),
                   ("templates_known", str(len(self.miner))),
                   ("error_lines_learned", str(self._mined))),
        ),)

    def snapshot(self) -> object:
        now = self.clock.monotonic()
        return {
            "version": 1,
            "miner": self.miner.snapshot(),
            "mined": self._mined,
            "learned_seconds": self._learned_before + now - self._started,
            "fired_ago": {k: now - t for k, t in self._fired.items()},
            "recent_ago": [now - t for t in self._recent],
        }

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        now = self.clock.monotonic()
        self.miner.restore(state.get("miner"))
        self._mined = int(state.get("mined", 0))
        self._learned_before = float(state.get("learned_seconds", 0.0))
        self._started = now
        self._fired = {str(k): now - float(v) for k, v in dict(state.get("fired_ago", {})).items()}
        self._recent = [now - float(v) for v in state.get("recent_ago", [])]
