"""``BurstDetector``: a signature's or a template's rate far above its own baseline.

Every signature match (first step) counts for its signature; every error-looking line that no
signature matched counts for its template (read from a shared ``TemplateMiner`` without
learning: the ``NovelErrorDetector`` feeding the same miner does the learning). Counts are kept
in fixed windows of ``window`` seconds; the baseline is an EWMA of the per-window counts. Once a
key has ``min_history`` windows behind it, a window reaching ``max(min_count, factor x
baseline)`` raises ONE ``burst`` detection (on the line that crossed); the key stays "bursting",
silently, until a window ends below the threshold.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from sigwatch.clock import Clock
from sigwatch.detectors.base import LineEvent, StreamContext
from sigwatch.detectors.templates import ERROR_INTEREST, TemplateMiner, looks_like_error
from sigwatch.model import Detection, Remediation, Severity

__all__ = ["BurstDetector"]

_REMEDIATION = Remediation(
    summary="The same kind of line suddenly repeats far more often than it usually does on "
            "this node.",
    steps=(
        ("Read the line: a burst of the same error often means a failing device, link or "
        "filesystem, or a job retrying in a loop."),
        "Check whether other nodes show the same burst at the same time (shared cause).",
    ),
    action="investigate",
)


@dataclass(slots=True)
class _Rate:
    start: float
    count: int = 0
    ewma: float = 0.0
    windows: int = 0
    bursting: bool = False


class BurstDetector:
    """One ``burst`` detection per burst of a signature or a template."""

    name = "burst"
    line_time = False  # it never reads a line's own time (detectors.base)
    # A line no signature matched counts only when it reads like an error (detectors.base).
    unmatched_gate = staticmethod(looks_like_error)

    def __init__(
        self,
        clock: Clock,
        *,
        miner: TemplateMiner | None = None,
        window: float = 60.0,
        factor: float = 10.0,
        min_count: int = 20,
        min_history: int = 5,
        alpha: float = 0.1,
        max_keys: int = 5000,
        host: str = "",
        status: str = "stable",
    ) -> None:
        self.clock = clock
        self.miner = miner
        self.window = window
        self.factor = factor
        self.min_count = min_count
        self.min_history = min_history
        self.alpha = alpha
        self.max_keys = max_keys
        self.host = host
        self.status = status
        self._rates: OrderedDict[str, _Rate] = OrderedDict()

    @property
    def interest(self) -> re.Pattern[bytes] | None:
        return ERROR_INTEREST if self.miner is not None else None

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

    def threshold(self, rate: _Rate) -> float:
        return max(float(self.min_count), self.factor * rate.ewma)

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        keys: list[tuple[str, str, str]] = []  # (key, kind, what)
        for m in event.matches:
            if m.step == 0:
                keys.append((f"sig:{m.signature}", "signature", m.signature))
        if not keys and self.miner is not None and looks_like_error(event.line.text):
            tpl = self.miner.match(event.line.text)
            if tpl is not None:
                keys.append((f"tpl:{tpl.id}", "template", tpl.text))
        if not keys or event.replaying:
            return ()
        now = self.clock.monotonic()
        out: list[Detection] = []
        for key, kind, what in dict.fromkeys(keys):
            rate = self._rates.get(key)
            if rate is None:
                rate = self._rates[key] = _Rate(now)
                while len(self._rates) > self.max_keys:
                    self._rates.popitem(last=False)
            self._rates.move_to_end(key)
            self._roll(rate, now)
            rate.count += 1
            if (rate.windows >= self.min_history and not rate.bursting
                    and rate.count >= self.threshold(rate)):
                rate.bursting = True
                out.append(self._burst(event, rate, kind, what))
        return out

    def _roll(self, rate: _Rate, now: float) -> None:
        passed = math.floor((now - rate.start) / self.window)
        if passed < 1:
            return
        if rate.bursting and rate.count < self.threshold(rate):
            rate.bursting = False
        if not rate.bursting:  # the baseline is frozen during a burst
            rate.ewma = (1 - self.alpha) * rate.ewma + self.alpha * rate.count
            rate.ewma *= (1 - self.alpha) ** (passed - 1)  # the empty windows in between
        if passed > 1:
            rate.bursting = False
        rate.windows += passed
        rate.start += passed * self.window
        rate.count = 0

    def _burst(self, event: LineEvent, rate: _Rate, kind: str, what: str) -> Detection:
        info = event.stream.info
        line = event.line
        label = f"signature {what}" if kind == "signature" else "template"
        return Detection(
            signature="burst", title="Burst Of Repeated Error Lines", severity=Severity.WARNING,
            status=self.status, source=info.source, path=info.path, stream_key=info.key,
            line=line.lineno, offset=line.offset, text=line.text, time=self.clock.time(),
            remediation=_REMEDIATION, rank=line.rank, host=self.host,
            labels=(("burst_of", kind),),
            about=(f"{label}: {rate.count} lines within {self.window:.0f} s, usual "
                   f"{rate.ewma:.2f} per {self.window:.0f} s"),
            facts=(("kind", kind), (kind, what), ("count", str(rate.count)),
                   ("window_seconds", f"{self.window:g}"),
                   ("baseline_per_window", f"{rate.ewma:.3g}")))

    def snapshot(self) -> object:
        return {"version": 1,
                "rates": {k: [r.ewma, r.windows, r.bursting] for k, r in self._rates.items()}}

    def restore(self, state: object) -> None:
        if not isinstance(state, dict) or state.get("version") != 1:
            return
        now = self.clock.monotonic()
        self._rates.clear()
        for key, (ewma, windows, bursting) in dict(state.get("rates", {})).items():
            self._rates[str(key)] = _Rate(now, 0, float(ewma), int(windows), bool(bursting))
