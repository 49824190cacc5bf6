"""Progress lines of common trainers: step, step time, throughput, loss, grad norm, loss scale.

Built-in extractors (one regex each, named groups) cover Megatron-LM iteration lines, Hugging
Face Trainer loss dicts and its tqdm bars (``it/s`` and ``s/it``), Lightning progress bars (tqdm
and "step N" styles), DeepSpeed (``step=N``, throughput timer), the fp16 loss-scale overflow
lines of DeepSpeed, Megatron and apex (the step was skipped, the scale lowered) and any report
of the dynamic loss scale in the wordings frameworks print (lowered, raised, stated, an
overflow without its scale: ``_SCALE_REPORT``, ``overflow_note``, ``scale_value``), nanoGPT
(``iter N: loss X, time Yms``), Keras (``9ms/step``) and plain ``step N ... time`` prints. Users
add their own: a regex with named groups ``step``, ``time`` (seconds) or ``time_ms``, ``loss``,
``grad_norm``, ``loss_scale``, ``throughput``.

``ProgressParser.parse`` returns one ``Progress`` per progress line (or None). Loss, grad norm and
loss scale are also found by a generic field scan in every known spelling (``'loss': x``,
``loss: x``, ``loss x``, ``loss=x``), so NaN/Inf is seen whatever the trainer. ``interest`` is one
bytes regex selecting candidate lines so that nothing runs in Python for other lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter, itemgetter
from typing import Any, Final, cast

__all__ = [
    "BUILTIN_EXTRACTORS",
    "BULK_BYTES",
    "BULK_WORDS",
    "Extractor",
    "Progress",
    "ProgressParser",
    "literal_interest",
    "parse_number",
]

_NUM = r"[-+]?(?:nan|NaN|NAN|inf(?:inity)?|Inf(?:inity)?|INF|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)"


def parse_number(text: str) -> float:
    """A float from a log figure (``nan``, ``Inf``, ``1,234.5``, ``1.6E-05``)."""
    return float(text.replace(",", ""))


@dataclass(frozen=True, slots=True)
class Progress:
    """What one progress line says. ``step_time`` is seconds per optimiser step."""

    kind: str  # which extractor recognised the line (the series name)
    step: int | None = None
    step_time: float | None = None
    throughput: float | None = None  # samples, tokens or images per second (higher is faster)
    loss: float | None = None
    grad_norm: float | None = None
    loss_scale: float | None = None
    eval: bool = False  # an evaluation / validation bar: activity, not a training step
    overflow: bool = False  # an fp16 overflow line: the step was skipped, scale lowered
    attempted_scale: float | None = None  # an overflow line's scale before it was lowered
    epoch: float | None = None  # a Hugging Face style ``'epoch': x`` (epochs done, a fraction)

    @property
    def cost(self) -> float | None:
        """Seconds per step, or the inverse of throughput: the figure a slowdown raises."""
        if self.step_time is not None and self.step_time > 0:
            return self.step_time
        if self.throughput is not None and self.throughput > 0:
            return 1.0 / self.throughput
        return None

    @property
    def nonfinite(self) -> tuple[str, ...]:
        """Names of the figures that are NaN or infinite."""
        out = []
        for name in ("loss", "grad_norm"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                out.append(name)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Extractor:
    """One progress-line shape: a name, a ``str`` regex with named groups, an optional literal.

    Groups understood: ``step``, ``time`` (s), ``time_ms``, ``s_per_it``, ``it_per_s``,
    ``throughput``, ``loss``, ``grad_norm``, ``loss_scale``, ``desc`` (a tqdm description, used
    to tell training bars from evaluation ones).
    """

    name: str
    pattern: re.Pattern[str]
    interest: bytes  # a bytes regex fragment that every matching line contains
    needle: str = ""  # a literal every matching line holds: a cheap test before the regex

    @classmethod
    def user(cls, name: str, regex: str) -> Extractor:
        """A user-defined extractor from config: any regex with the named groups above."""
        pattern = re.compile(regex)
        known = {"step", "time", "time_ms", "s_per_it", "it_per_s", "throughput", "loss",
                 "grad_norm", "loss_scale", "desc"}
        unknown = set(pattern.groupindex) - known
        if unknown:
            raise ValueError(f"extractor {name}: unknown group(s) {sorted(unknown)}")
        if not set(pattern.groupindex) & (known - {"desc"}):
            raise ValueError(f"extractor {name}: needs at least one named group")
        # the interest path must see every line the regex can match: use the regex itself
        return cls(name, pattern, regex.encode())


_SCALE = r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"  # a loss scale as optimizers print it
_OVERFLOW_KINDS = frozenset({"deepspeed_overflow", "fp16_overflow", "apex_overflow",
                             "overflow_note"})
# The dynamic loss scale reported lowered (an overflow) or raised, in the frameworks' wordings:
# DeepSpeed's "Attempted loss scale: 65536, reducing to 32768" (any prefix: "OVERFLOW!
# Skipping step.", "fp16 dynamic loss scale overflow!") and "Reducing dynamic loss scale from
# 1024 to 512.0" / "Increasing dynamic loss scale from 512 to 1024"; apex's and torch_npu's
# "Loss scaler reducing loss scale to 512.0"; fairseq's "overflow detected, setting loss scale
# to: 64.0"; and prose such as "loss scale reduced from 1024 to 512" or "lowering the loss
# scale to 8". A lowered scale is ``loss_scale`` (``attempted`` the scale before it, when
# printed); ``up`` marks a raised one.
_LOSS_SCALE = r"(?:(?:dynamic|fp16|amp|grad(?:ient)?)\s+)?loss[ _]?scal(?:e|ing)(?:\s+factor)?"
_DOWN = (r"reduc(?:e|es|ed|ing)|decreas(?:e|es|ed|ing)|lower(?:s|ed|ing)?|halv(?:e|es|ed|ing)"
         r"|drop(?:s|ped|ping)?|cut(?:s|ting)?|shr[iu]nk(?:s|ing)?|f[ae]ll(?:s|en|ing)?")
_UP = r"increas(?:e|es|ed|ing)|rais(?:e|es|ed|ing)|gr[eo]w(?:s|n|ing)?|doubl(?:e|es|ed|ing)"
_FROM_TO = (r"(?:\s+from\s+(?P<{a}>" + _SCALE + r"))?\s+to:?\s*(?P<{b}>" + _SCALE
            + r")")
_SCALE_REPORT = re.compile(
    r"(?i)attempted\s+loss\s+scale:?\s*(?P<attempted>" + _SCALE + r"),?\s+reducing\s+to:?\s*"
    r"(?P<loss_scale>" + _SCALE + r")"
    r"|\b(?:" + _DOWN + r")\s+(?:the\s+)?" + _LOSS_SCALE + _FROM_TO.format(a="a_down", b="b_down")
    + r"|(?<![\w/.])" + _LOSS_SCALE + r"\s+(?:(?:was|is|has\s+been|had\s+been|gets?|got)\s+)?"
    r"(?:" + _DOWN + r")" + _FROM_TO.format(a="a_fell", b="b_fell")
    + r"|\bsetting\s+(?:the\s+)?" + _LOSS_SCALE + r"\s+to:?\s*(?P<b_set>" + _SCALE
    + r")"
    r"|(?P<up>\b(?:" + _UP + r")\s+(?:the\s+)?" + _LOSS_SCALE
    + _FROM_TO.format(a="a_up", b="b_up") + r"|(?<![\w/.])" + _LOSS_SCALE
    + r"\s+(?:(?:was|is|has\s+been|had\s+been|gets?|got)\s+)?(?:" + _UP + r")"
    + _FROM_TO.format(a="a_grew", b="b_grew") + r")")
_REPORT_FROM = ("attempted", "a_down", "a_fell", "a_up", "a_grew")
_REPORT_TO = ("loss_scale", "b_down", "b_fell", "b_set", "b_up", "b_grew")
# a tqdm bar's "N/M [" before an overflow report glued to it: the step of that report
_BAR_STEP_RE = re.compile(r"\d{1,3}%\|[^|\r\n]*\|\s*(\d+)/(?:\d+|\?)\s*\[")
# Hugging Face's fraction of epochs done, in a loss dict or its JSON log
_EPOCH_RE = re.compile(r"""['"]epoch['"]:\s*(?P<epoch>""" + _NUM + r")")
_TQDM_RATE = (r"(?:(?P<it_per_s>\d+(?:\.\d+)?)\s?it/s|(?P<s_per_it>\d+(?:\.\d+)?)\s?s/it)")

BUILTIN_EXTRACTORS: tuple[Extractor, ...] = (
    Extractor("megatron", re.compile(
        r"iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*"
        r"(?P<time_ms>[\d.]+)"), rb"elapsed time per iteration"),
    Extractor("nanogpt", re.compile(
        r"\biter (?P<step>\d+): loss (?P<loss>" + _NUM + r"), time (?P<time_ms>[\d.]+)ms"),
        rb"iter [0-9]+: loss"),
    Extractor("deepspeed_throughput", re.compile(
        r"global_step=(?P<step>\d+),.*?CurrSamplesPerSec=(?P<throughput>[\d.]+)"),
        rb"SamplesPerSec="),
    Extractor("deepspeed_step", re.compile(
        r"\[Rank \d+\] step=(?P<step>\d+), skipped=\d+"), rb"\] step=[0-9]"),
    Extractor("deepspeed_overflow", re.compile(
        r"OVERFLOW! Rank \d+ Skipping step\.(?: Attempted loss scale: (?P<attempted>[\d.]+)"
        r"(?:, reducing to (?P<loss_scale>[\d.]+))?)?"), rb"OVERFLOW! Rank"),
    # DeepSpeed's and Megatron's fp16 optimizers: "Overflow detected. Skipping step.
    # Attempted loss scale: 1024, reducing to 512.0"
    Extractor("fp16_overflow", re.compile(
        r"Overflow detected\. Skipping step\. Attempted loss scale: (?P<attempted>" + _SCALE
        + r"), reducing to (?P<loss_scale>" + _SCALE + r")"), rb"Overflow detected"),
    # apex amp: "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0"
    Extractor("apex_overflow", re.compile(
        r"Gradient overflow\.\s+Skipping step, loss scaler \d+ reducing loss scale to "
        r"(?P<loss_scale>" + _SCALE + r")"), rb"Gradient overflow"),
    # Any other report of the dynamic loss scale being lowered or raised, in the wordings the
    # frameworks print (see ``_SCALE_REPORT``): a lowering is an overflow line.
    Extractor("scale_report", _SCALE_REPORT, rb"(?i:loss)"),
    # An overflow reported without its scale ("Gradient overflow. Skipping step", DeepSpeed's
    # "Grad overflow on iteration 4"): the scale, when printed, is on another line.
    Extractor("overflow_note", re.compile(
        r"(?i)(?<!no )\bgrad(?:ient)?s?\s+overflow\b(?:\s+on\s+iteration:?\s*(?P<step>\d+)"
        r"|[^\n]{0,40}?\bskip(?:ping|ped)\s+(?:the\s+)?(?:step|iteration|update|batch))"),
        rb"(?i:overflow)"),
    Extractor("keras", re.compile(
        r"^\s*(?P<step>\d+)/\d+ - \d+s - (?P<time_ms>[\d.]+)ms/step"), rb"ms/step"),
    # tqdm (HF Trainer, Lightning's default bar, plain tqdm loops): "desc: 12%|...| 70/1000
    # [00:12<02:51,  5.43it/s, loss=0.69]"
    Extractor("tqdm", re.compile(
        r"(?:^|\s)(?:(?P<desc>[^|\r\n]*?):\s*)?\d{1,3}%\|[^|]*\|\s*(?P<step>\d+)/(?:\d+|\?)\s*"
        r"\[[^\],]*,\s*" + _TQDM_RATE + r"[,\]]"), rb"it/s|s/it"),
    # Lightning rich bar: "Epoch 0/9 ━━━━ 371/3000 0:01:23 • 0:09:52 4.44it/s v_num: 0 ..."
    Extractor("lightning_rich", re.compile(
        r"(?P<desc>Epoch \d+/\d+)\s+[━╸╺─ ]+\s+(?P<step>\d+)/\d+\s+\S+\s+•\s+\S+\s+"
        + _TQDM_RATE), rb"\xe2\x80\xa2"),
    # plain prints: "step 100 | loss 2.3 | time 0.81s", "Epoch 0: step 250 loss=0.13
    # samples/s=405", "[epoch 1/5] batch 100/800 loss=0.61 15.1 it/s", "iter 200/5004 loss 6.8
    # step_time 704.7 ms"
    Extractor("plain", re.compile(
        r"(?i)(?<![\w/])(?:global[_ ])?(?:step|iter(?:ation)?|batch)\s*[:=]?\s*(?P<step>\d+)"
        r"(?:\s*/\s*\d+)?(?![\w/.])"), rb"(?i:step|iter|batch)"),
    Extractor("hf_dict", re.compile(r"^\s*\{'(?:loss|train_loss|grad_norm)': "), rb"\{'"),
    # A line that only states the loss scale ("loss scale: 1024", "loss_scale=512", "current
    # loss scale is 64"): tried last, after every shape that also reads it as a field.
    Extractor("scale_value", re.compile(
        r"(?i)(?<![\w/.'\"])loss[ _]scale\s*(?:[:=]|\bis\b|\bnow\b)?\s*(?P<loss_scale>"
        + _SCALE + r")(?![\w.])"), rb"(?i:loss)"),
)

_NEEDLES = {"megatron": "elapsed time per iteration", "nanogpt": "iter ",
            "deepspeed_throughput": "SamplesPerSec=", "deepspeed_step": "] step=",
            "deepspeed_overflow": "OVERFLOW!", "fp16_overflow": "Overflow detected",
            "apex_overflow": "Gradient overflow", "keras": "ms/step", "tqdm": "%|",
            "hf_dict": "{'", "lightning_rich": "\u2022", "scale_report": "cale",
            "overflow_note": "verflow", "scale_value": "cale"}
BUILTIN_EXTRACTORS = tuple(replace(e, needle=_NEEDLES.get(e.name, ""))
                           for e in BUILTIN_EXTRACTORS)
_BUILTIN_NAMES = frozenset(e.name for e in BUILTIN_EXTRACTORS)


def literal_interest(keys: Iterable[bytes]) -> bytes:
    """A case-insensitive alternation of literals, every branch led by a literal byte."""
    root: dict[bytes, Any] = {}
    for key in keys:
        variants = {key[0] | 0x20, key[0] & 0xDF} if chr(key[0]).isalpha() else {key[0]}
        for first in sorted(variants):
            node = root.setdefault(re.escape(bytes([first])), {})
            for b in key[1:]:
                tok = (b"[" + bytes([b | 0x20, b & 0xDF]) + b"]" if chr(b).isalpha()
                       else re.escape(bytes([b])))
                node = node.setdefault(tok, {})
            node[b""] = {}

    def emit(node: dict[bytes, Any]) -> bytes:
        if b"" in node:
            return b""
        alts = [tok + emit(child) for tok, child in sorted(node.items())]
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return b"|".join(tok + emit(child) for tok, child in sorted(root.items()))


# Every line a built-in extractor or the field scan can read holds one of these.
_BUILTIN_INTEREST = literal_interest([
    b"step", b"iter", b"batch", b"loss", b"grad norm", b"grad_norm", b"gradient norm", b"it/s",
    b"s/it", b"samplespersec"]) + rb"|\xe2\x80\xa2"

# Loss / grad norm / loss scale in every spelling: dict ('loss': x), key: value, key value,
# key=value. Not preceded by a word character or '/', so "val_loss" and "eval/loss" are not
# training figures.
_FIELD_RE = re.compile(
    r"(?<![\w/.])['\"]?(?P<key>(?:lm |train(?:ing)?[ _])?loss(?:[ _]scale)?|grad(?:ient)?[ _]?norm)"
    r"['\"]?\s*[:=]?\s*['\"]?(?P<val>" + _NUM + r")(?![\w.])", re.IGNORECASE)
# what follows the step number on a plain line: a time, a rate or a throughput
_PLAIN_TIME_RE = re.compile(
    r"(?i)(?<![\w/])(?:step[_ ]?time|time|elapsed|dt)\s*[:=]?\s*(?P<time>\d+(?:\.\d+)?)\s*"
    r"(?P<unit>ms|s|sec)\b"
    r"|(?<![\w.+-])(?P<it_per_s>\d+(?:\.\d+)?)\s?it/s|(?<![\w.+-])(?P<s_per_it>\d+(?:\.\d+)?)\s?s/it"
    r"|(?<![\w.+-])(?P<throughput>\d+(?:\.\d+)?)\s?(?:samples|tokens|tok|images|img|imgs|seqs)/s\b"
    r"|(?<![\w/])(?:samples|tokens|images|img)(?:/s|_per_sec(?:ond)?)\s*[:=]?\s*"
    r"(?P<throughput2>\d+(?:\.\d+)?)")
_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_NOT_PROGRESS_MAX = 4096
_EVAL_DESC_RE = re.compile(r"(?i)valid|eval|test|sanity|predict|tokeni|map|download|load|infer")


def _group(m: dict[str, str | None], name: str) -> str | None:
    return m.get(name)


class ProgressParser:
    """All extractors, tried most specific first, plus the generic field scan."""

    def __init__(self, extractors: Iterable[Extractor] = (), *, builtin: bool = True) -> None:
        self.extractors: tuple[Extractor, ...] = (
            (*tuple(extractors), *(BUILTIN_EXTRACTORS if builtin else ())))
        # Built-ins: literals any of their lines holds, as a literal-led trie (fast in ``re``);
        # user extractors add their own regex.
        user = [e.interest for e in self.extractors if e.name not in _BUILTIN_NAMES]
        self.interest: re.Pattern[bytes] = re.compile(b"|".join([*user, _BUILTIN_INTEREST]))
        # Texts known to be no progress line, by shape (digits as 0): a log repeats its
        # non-progress lines that merely hold "step" or "loss" (checkpoint saves, eval
        # results) with other numbers. Only for the built-in extractors, whose answer does not
        # depend on the digits of a line without "it/s" (see ``parse``).
        self._not_progress: dict[bytes, None] | None = {} if not user else None

    @property
    def names(self) -> Sequence[str]:
        return [e.name for e in self.extractors]

    def parse(self, text: str) -> Progress | None:
        """The progress a line reports, or None when it is not a progress line."""
        known = self._not_progress
        if known is None or "it/s" in text:
            return self._parse(text)
        # Every built-in regex reads digits as \d and counts them, and no test on a value
        # decides None except a rate of 0 it/s: with every digit made 0, a text parses to
        # None exactly when the text itself does.
        shape = text.encode("utf-8", "surrogateescape").translate(_ZERO_DIGITS)
        if shape in known:
            return None
        found = self._parse(text)
        if found is None:
            if len(known) >= _NOT_PROGRESS_MAX:
                known.clear()
            known[shape] = None
        return found

    def _parse(self, text: str) -> Progress | None:
        for ex in self.extractors:
            if ex.needle and ex.needle not in text:
                continue
            m = ex.pattern.search(text)
            if m is None:
                continue
            progress = self._build(ex.name, m, text)
            if progress is not None:
                return progress
        fields = _fields(text)
        if fields and ("loss" in fields or "grad_norm" in fields):
            return Progress("fields", loss=fields.get("loss"), grad_norm=fields.get("grad_norm"),
                            loss_scale=fields.get("loss_scale"), epoch=_epoch(text))
        return None

    @staticmethod
    def _build(name: str, match: re.Match[str], text: str) -> Progress | None:
        m = match.groupdict()
        step_s = _group(m, "step")
        step = int(step_s) if step_s else None
        step_time, throughput = _timing(m)
        if name == "plain":
            for t in _PLAIN_TIME_RE.finditer(text, match.end()):
                more_time, more_tp = _timing(t.groupdict())
                step_time = step_time if step_time is not None else more_time
                throughput = throughput if throughput is not None else more_tp
        desc = _group(m, "desc")
        is_eval = bool(desc and _EVAL_DESC_RE.search(desc))
        fields = _fields(text)
        loss = _group(m, "loss")
        scale = _group(m, "loss_scale")
        grad = _group(m, "grad_norm")
        attempted = _group(m, "attempted")
        if name == "plain" and step_time is None and throughput is None and "loss" not in fields:
            return None
        overflow = name in _OVERFLOW_KINDS
        if name == "scale_report":
            scale = next((v for k in _REPORT_TO if (v := m.get(k))), None)
            attempted = next((v for k in _REPORT_FROM if (v := m.get(k))), None)
            # lowered: an overflow ("setting" the scale is one when the line says so)
            overflow = m.get("up") is None and (m.get("b_set") is None
                                                 or "overflow" in text.lower())
        if overflow and step is None and "%|" in text:  # glued to a tqdm bar: the bar's step
            bars = _BAR_STEP_RE.findall(text, 0, match.start())
            step = int(bars[-1]) if bars else None
        scale_value = parse_number(scale) if scale else fields.get("loss_scale")
        if name == "scale_value" and scale_value is not None and scale_value <= 0:
            scale_value = None  # "loss_scale: 0" is a config's "dynamic", not a scale
        return Progress(
            kind=name, step=step, step_time=step_time, throughput=throughput,
            loss=parse_number(loss) if loss else fields.get("loss"),
            grad_norm=parse_number(grad) if grad else fields.get("grad_norm"),
            loss_scale=scale_value, eval=is_eval, overflow=overflow,
            attempted_scale=parse_number(attempted) if attempted else None,
            epoch=_epoch(text),
        )


def _epoch(text: str) -> float | None:
    """Hugging Face's ``'epoch': x`` (epochs done) when the line holds one."""
    if "epoch'" not in text and 'epoch"' not in text:
        return None
    m = _EPOCH_RE.search(text)
    return parse_number(m.group("epoch")) if m is not None else None


def _timing(m: dict[str, str | None]) -> tuple[float | None, float | None]:
    """(seconds per step, throughput) from whichever timing groups matched."""
    step_time: float | None = None
    if (v := _group(m, "time_ms")) is not None:
        step_time = parse_number(v) / 1000.0
    elif (v := _group(m, "time")) is not None:
        step_time = parse_number(v) / (1000.0 if _group(m, "unit") == "ms" else 1.0)
    elif (v := _group(m, "s_per_it")) is not None:
        step_time = parse_number(v)
    elif (v := _group(m, "it_per_s")) is not None:
        rate = parse_number(v)
        step_time = 1.0 / rate if rate > 0 else None
    throughput_s = _group(m, "throughput") or _group(m, "throughput2")
    return step_time, (parse_number(throughput_s) if throughput_s else None)


# Where a match of _FIELD_RE can start, relative to its key word ("loss" or "norm"): the
# literal (lower case) that must stand between the start and the key word, longest first,
# each also with a quote in front (one character earlier).
_LOSS_LEADS = ("training ", "training_", "train ", "train_", "lm ", "")
_NORM_LEADS = ("gradient ", "gradient_", "gradient", "grad ", "grad_", "grad")
_FIELD_NAMES = 3  # loss, grad_norm, loss_scale: once all are found, later ones change nothing


def _starts(low: str, key: int, leads: tuple[str, ...], pos: int) -> list[int]:
    """Candidate match starts for the key word at ``key``, in non-decreasing order (the
    leads are longest first, so each start is after the one before)."""
    out: list[int] = []
    for lead in leads:
        x = key - len(lead)
        if x < pos or not low.startswith(lead, x):
            continue
        if x - 1 >= pos and low[x - 1] in "'\"":
            out.append(x - 1)
        out.append(x)
    return out


def _field_matches(text: str) -> Iterator[re.Match[str]]:
    """``_FIELD_RE.finditer(text)`` without trying every position of a long ASCII line.

    Every match holds "loss" or "norm" (any case) after one of a few literal leads, so for
    each such key word, in order, the regex is tried only where a match could start; the
    first start that matches is the leftmost match (a lead holds no key word, so the starts
    of a later key word are never before those of an earlier one).
    """
    if not text.isascii():
        yield from _FIELD_RE.finditer(text)
        return
    low = text.lower()
    pos = 0
    match = _FIELD_RE.match
    find = low.find
    a = find("loss")
    b = find("norm")
    while a != -1 or b != -1:
        if b == -1 or (a != -1 and a < b):
            key, leads = a, _LOSS_LEADS
        else:
            key, leads = b, _NORM_LEADS
        found = None
        for x in _starts(low, key, leads, pos):
            found = match(text, x)
            if found is not None:
                break
        if found is not None:
            yield found
            pos = found.end()
        else:
            pos = max(pos, key)
        nxt = max(pos, key + 1)
        if key == a:
            a = find("loss", nxt)
            if b != -1 and b < pos:
                b = find("norm", pos)
        else:
            b = find("norm", nxt)
            if a != -1 and a < pos:
                a = find("loss", pos)


def _fields(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in _field_matches(text):
        if len(out) == _FIELD_NAMES:
            break
        key = m.group("key").lower().replace("_", " ")
        if "scale" in key:
            name = "loss_scale"
        elif "norm" in key:
            name = "grad_norm"
        else:
            name = "loss"
        if name not in out:
            try:
                out[name] = parse_number(m.group("val"))
            except ValueError:
                continue
    return out


# -- the whole-chunk pass ------------------------------------------------------------------------
#
# Most progress lines of a long run have one of a few shapes: Megatron's iteration line, the
# Hugging Face Trainer's loss dict and tqdm bars (HF, Lightning). ``BulkProgress`` reads those
# over a whole chunk of raw bytes with one regex and converts the figures in bulk; the other lines
# go through ``ProgressParser.parse`` one by one. Each shape is a closed grammar (fixed keys in
# their fixed order, plain finite numbers, an optional ``[rankN]:`` launcher tag), so a line it
# accepts holds nothing else: normalisation gives one part (tqdm: one per ``\r`` rewrite) with
# that rank, and ``ProgressParser.parse`` of the part gives exactly the figures read here.
# Anything else (another key, an ANSI colour, a second launcher tag, ``?it/s``, a NaN) is not
# accepted and is parsed per line. tests/unit/test_progress.py checks that on generated
# variants and on the corpus; tests/unit/test_detector_equivalence.py on whole logs.

# A finite number as trainers print it (a subset of what the field scan reads: NaN and Inf,
# rare and important, always take the per-line path).
_NUMB = rb"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
# torchrun's tag; what follows it on the line is the text (its figures need no other envelope).
# Not "[defaultN]:" (--tee's other form): "default" would put the letters of "fault" in the
# vocabulary below, and error words could then no longer skip these lines.
_BULK_TAG = rb"\[rank(?P<rank>\d{1,6})\]:[ \t]?"


def _opt(item: bytes) -> bytes:
    """An optional item (an alternation with an empty branch: cheaper than ``?`` in ``re``)."""
    return b"(?:" + item + b"|)"


_BULK_MEGATRON = (
    rb"[ \t]*(?:\[(?P<m_ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\][ \t]*|)"
    rb"iteration +(?P<m_step>\d+) */ *\d+ \|"
    rb" consumed samples: +\d+ \|"
    + _opt(rb" skipped samples: +\d+ \|") + _opt(rb" consumed tokens: +\d+ \|")
    + rb" elapsed time per iteration \(ms\): (?P<m_ms>\d+(?:\.\d+)?) \|"
    + _opt(rb" throughput per GPU \(TFLOP/s/GPU\): +" + _NUMB + rb" \|")
    + rb" learning rate: +" + _NUMB + rb" \|"
    + _opt(rb" decoupled learning rate: +" + _NUMB + rb" \|")
    + rb" global batch size: +\d+ \|"
    + _opt(rb" lm loss: +(?P<m_loss>" + _NUMB + rb") \|")
    + _opt(rb" loss scale: +(?P<m_scale>" + _NUMB + rb") \|")
    + _opt(rb" grad norm: +(?P<m_gn>" + _NUMB + rb") \|")
    + _opt(rb" num zeros: +" + _NUMB + rb" \|") + _opt(rb" params norm: +" + _NUMB + rb" \|")
    + _opt(rb" actual seqlen: +\d+ \|")
    + rb" number of skipped iterations: +(?P<m_skipped>\d+) \|"
    rb" number of nan iterations: +\d+ \|"
    + _opt(rb" samples per second: +" + _NUMB + rb" \|") + _opt(rb" TFLOPs: +" + _NUMB + rb" \|")
    + rb"[ \t]*")
_BULK_HF = (rb"[ \t]*\{'loss': (?P<h_loss>" + _NUMB + rb")"
            + _opt(rb", 'grad_norm': (?P<h_gn>" + _NUMB + rb")")
            + rb", 'learning_rate': " + _NUMB + _opt(rb", 'epoch': (?P<h_ep>" + _NUMB + rb")")
            + rb"\}[ \t]*")
# tqdm's postfix keys that hold no figure the field scan reads
_TQDM_SAFE = rb"(?:, (?:v_num|lr|step|epoch|global_step)=" + _NUMB + rb")*"
# where a tqdm line may start (its bars are then read one by one, as normalisation splits them)
_TQDM_START = rb"(?:Epoch \d+: +)?[ \t]*\d{1,3}%\|"
# One tqdm bar (HF Trainer, Lightning): optional ``Epoch N:``, the bar, a numeric rate, an
# optional loss in the postfix. The bar's bytes: blanks, '#' and Unicode block elements.
_TQDM_PART_RE = re.compile(
    rb"(?:Epoch \d+: +)?[ \t]*\d{1,3}%\|[ #\xe2\x96\x80-\x9f]*\| *(\d+)/(?:\d+|\?) *"
    rb"\[[0-9:]+<[0-9:?]+, *(?:(\d+(?:\.\d+)?) ?it/s|(\d+(?:\.\d+)?) ?s/it)"
    + _TQDM_SAFE + _opt(rb", (?:train_)?loss=(" + _NUMB + rb")" + _TQDM_SAFE) + rb"\]")
_BULK_LINE = (rb"(?:(?:" + _BULK_TAG + rb"|)(?:(?P<megatron>" + _BULK_MEGATRON + rb")(?=\n)"
              rb"|(?P<hf_dict>" + _BULK_HF + rb")(?=\n)|(?P<tqdm>(?=" + _TQDM_START + rb")))"
              rb"|\r+(?P<tqdm_cr>(?=" + _TQDM_START + rb")))")
_BULK_FIRST_RE = re.compile(_BULK_LINE)
_BULK_RE = re.compile(rb"\n" + _BULK_LINE)
# Every run of letters a line the pass accepts can hold is part of one of these (they are
# read off the grammars themselves, regex syntax and group names included: more words than
# needed). A pattern that needs another run of letters cannot match such a line.
BULK_WORDS = frozenset(w.lower() for w in re.findall(
    rb"[A-Za-z]+", _BULK_LINE + b" " + _TQDM_PART_RE.pattern))
# The bytes such a line can hold: ASCII, and the UTF-8 bytes of a tqdm bar's block elements.
BULK_BYTES = frozenset(range(128)) | {0xE2, 0x96} | frozenset(range(0x80, 0xA0))

# What a progress record holds, by position (a tuple: no object per record).
R_START: Final = 0  # where the line starts in the chunk
R_PART: Final = 1  # which part of the normalised line (a tqdm rewrite)
R_RANK: Final = 2
R_KIND: Final = 3
R_STEP: Final = 4
R_STEP_TIME: Final = 5
R_THROUGHPUT: Final = 6
R_LOSS: Final = 7
R_GRAD_NORM: Final = 8
R_LOSS_SCALE: Final = 9
R_FLAGS: Final = 10
R_COST: Final = 11  # ``Progress.cost``
R_ATTEMPTED: Final = 12  # ``Progress.attempted_scale``
R_EPOCH: Final = 13  # ``Progress.epoch``
# R_FLAGS bits
F_EVAL: Final = 1  # an evaluation bar: activity, not a training step
F_OVERFLOW: Final = 2  # an fp16 overflow line (the step was skipped)
F_SKIPPED: Final = 4  # the text reports skipped iterations or an overflow (the bad-numbers test)

ProgressRecord = tuple[int, int, str | None, str, int | None, float | None, float | None,
                       float | None, float | None, float | None, int, float | None,
                       float | None, float | None]


def record_of(start: int, part: int, rank: str | None, progress: Progress,
              skipped: bool) -> ProgressRecord:
    """The tuple form of one parsed ``Progress`` (what the per-line path gives)."""
    flags = (F_EVAL if progress.eval else 0) | (F_OVERFLOW if progress.overflow else 0) | (
        F_SKIPPED if skipped else 0)
    return (start, part, rank, progress.kind, progress.step, progress.step_time,
            progress.throughput, progress.loss, progress.grad_norm, progress.loss_scale, flags,
            progress.cost, progress.attempted_scale, progress.epoch)


def progress_of(record: ProgressRecord) -> Progress:
    """The ``Progress`` a record stands for."""
    flags = record[R_FLAGS]
    return Progress(record[R_KIND], record[R_STEP], record[R_STEP_TIME], record[R_THROUGHPUT],
                    record[R_LOSS], record[R_GRAD_NORM], record[R_LOSS_SCALE],
                    eval=bool(flags & F_EVAL), overflow=bool(flags & F_OVERFLOW),
                    attempted_scale=record[R_ATTEMPTED], epoch=record[R_EPOCH])


@dataclass(slots=True)
class Shape:
    """The records of one shape in a chunk, as columns (one entry per record, in line order).

    Every record is finite, no evaluation bar, no overflow line and has no throughput (the
    shapes' grammars say so). ``parts`` is None when each record is its line's only part;
    ``skipped`` is None when no record's text reports skipped iterations.
    """

    kind: str
    starts: list[int]
    ranks: list[str | None]
    steps: list[int | None]
    step_times: list[float | None]
    losses: list[float | None]
    grad_norms: list[float | None]
    loss_scales: list[float | None]
    parts: list[int] | None = None
    skipped: list[bool] | None = None
    scaled: bool = False  # some record has a loss scale
    stamps: list[bytes | None] | None = None  # each line's timestamp (None: none has one)
    epochs: list[float | None] | None = None  # each record's epoch (None: none has one)

    def __len__(self) -> int:
        return len(self.starts)

    def record(self, i: int) -> ProgressRecord:
        t = self.step_times[i]
        return (self.starts[i], self.parts[i] if self.parts is not None else 0, self.ranks[i],
                self.kind, self.steps[i], t, None, self.losses[i], self.grad_norms[i],
                self.loss_scales[i], F_SKIPPED if self.skipped and self.skipped[i] else 0,
                t if t is not None and t > 0 else None, None,
                self.epochs[i] if self.epochs is not None else None)

    def key(self, i: int) -> tuple[int, int]:
        """(line start, part) of record ``i``: its place in the chunk."""
        return self.starts[i], self.parts[i] if self.parts is not None else 0


@dataclass(slots=True)
class BulkRecords:
    """What the whole-chunk pass read: each accepted line as (start, newline index), in
    order, and the records of those lines by shape."""

    lines: list[tuple[int, int]] = field(default_factory=list)
    shapes: list[Shape] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(s) for s in self.shapes)

    def records(self) -> list[ProgressRecord]:
        """Every record, in line order."""
        out = [shape.record(i) for shape in self.shapes for i in range(len(shape))]
        out.sort(key=itemgetter(R_START, R_PART))
        return out


def _floats(raw: Sequence[bytes | None]) -> list[float | None]:
    return [float(x) if x else None for x in raw]


def _ranks(raw: Sequence[bytes | None]) -> list[str | None]:
    if not any(raw):
        return [None] * len(raw)
    return [x.decode() if x is not None else None for x in raw]


def _picker(*names: str) -> Callable[[re.Match[bytes]], tuple[Any, ...]]:
    """Those groups of a ``_BULK_RE`` match, by index (no name lookups per match)."""
    index = _BULK_RE.groupindex
    pick = itemgetter(*(index[n] - 1 for n in names))
    return lambda m: pick(m.groups())


_MEGATRON_GROUPS = _picker("rank", "m_step", "m_ms", "m_loss", "m_scale", "m_gn", "m_skipped",
                           "m_ts")
_HF_GROUPS = _picker("rank", "h_loss", "h_gn", "h_ep")
_RANK_GROUP = _BULK_RE.groupindex["rank"]
_START = attrgetter("start")


class BulkProgress:
    """Reads the dominant progress shapes of a chunk in one pass (see above)."""

    def parse(self, data: bytes) -> BulkRecords:
        """Every accepted line of ``data`` (whole lines, each ending with a newline)."""
        found = list(_BULK_RE.finditer(data))
        first = _BULK_FIRST_RE.match(data)
        if first is not None:
            found.insert(0, first)
        out = BulkRecords()
        if not found:
            return out
        meg = [m for m in found if m.lastgroup == "megatron"]
        hf = [m for m in found if m.lastgroup == "hf_dict"]
        lines = out.lines
        if meg:
            ranks, steps, ms, loss, scale, gn, skipped, stamped = zip(
                *map(_MEGATRON_GROUPS, meg), strict=True)
            starts = _line_starts(meg, first)
            out.shapes.append(Shape(
                "megatron", starts, _ranks(ranks), list(map(int, steps)),
                [float(x) / 1000.0 for x in ms], _floats(loss), _floats(gn), _floats(scale),
                skipped=([x[0] != 48 for x in skipped]  # "skipped iterations:  1" (not 0)
                         if any(x[0] != 48 for x in skipped) else None),
                scaled=any(scale),
                stamps=list(stamped) if any(stamped) else None))
            lines.extend(zip(starts, [m.end() for m in meg], strict=True))
        if hf:
            ranks, loss, gn, epochs = zip(*map(_HF_GROUPS, hf), strict=True)
            starts = _line_starts(hf, first)
            none: list[Any] = [None] * len(hf)
            out.shapes.append(Shape("hf_dict", starts, _ranks(ranks), none, none,
                                    list(map(float, loss)), _floats(gn), none,
                                    epochs=_floats(epochs) if any(epochs) else None))
            lines.extend(zip(starts, [m.end() for m in hf], strict=True))
        if len(meg) + len(hf) < len(found):
            self._tqdm(data, [m for m in found if m.lastgroup in ("tqdm", "tqdm_cr")], first,
                       out)
        if len(out.shapes) > 1:
            lines.sort()
        return out

    @staticmethod
    def _tqdm(data: bytes, found: list[re.Match[bytes]], first: re.Match[bytes] | None,
              out: BulkRecords) -> None:
        """Lines that start like a tqdm bar: accepted when every ``\\r``-separated part of the
        line (as normalisation splits it) is a whole bar."""
        find = data.find
        begins = [m.end() for m in found]
        ends = [find(b"\n", b) for b in begins]
        pieces = [data[b:e].split(b"\r") for b, e in zip(begins, ends, strict=True)]
        pieces = [[x for x in p if x] if b"" in p else p for p in pieces]
        fullmatch = _TQDM_PART_RE.fullmatch
        bars = [list(map(fullmatch, p)) for p in pieces]
        starts: list[int] = []
        parts: list[int] = []
        ranks: list[str | None] = []
        rows: list[re.Match[bytes]] = []
        for m, end, line_bars in zip(found, ends, bars, strict=True):
            if None in line_bars:
                continue
            start = m.start() + (m is not first)
            out.lines.append((start, end))
            raw_rank = m.group(_RANK_GROUP)
            n = len(line_bars)
            starts += [start] * n
            parts += range(n)
            ranks += [raw_rank.decode() if raw_rank is not None else None] * n
            rows += cast("list[re.Match[bytes]]", line_bars)
        if not rows:
            return
        steps, ips, spi, loss = zip(*(m.groups() for m in rows), strict=True)
        times = [(1.0 / r if (r := float(a)) > 0 else None) if a is not None else float(b)
                 for a, b in zip(ips, spi, strict=True)]
        none: list[Any] = [None] * len(rows)
        out.shapes.append(Shape("tqdm", starts, ranks, list(map(int, steps)), times,
                                _floats(loss), none, none, parts=parts))


def _line_starts(found: list[re.Match[bytes]], first: re.Match[bytes] | None) -> list[int]:
    """Line starts of matches of ``_BULK_RE`` (which start at the newline before the line)
    and of ``_BULK_FIRST_RE`` (the chunk's first line)."""
    starts = [m.start() + 1 for m in found]
    if found[0] is first:
        starts[0] = 0
    return starts
