"""Progress extractors: every built-in trainer format and user-defined ones."""

from __future__ import annotations

import math

import pytest
from support.training_logs import FORMATS, progress_lines

from sigwatch.detectors.progress import Extractor, ProgressParser


class TestBuiltinExtractors:
    @pytest.mark.parametrize("fmt", FORMATS)
    def test_each_format_gives_step_time_or_throughput(self, fmt: str) -> None:
        """A step at 0.5 s prints a figure the parser turns back into 0.5 s (or 128/s)."""
        parser = ProgressParser()
        found = [p for line in progress_lines(fmt, 120, 0.5, 2.5)
                 if (p := parser.parse(line)) is not None and p.cost is not None]

        assert found, fmt
        p = found[-1]
        if p.step_time is not None:
            assert 0.5 == pytest.approx(p.step_time, rel=0.02)
        else:
            assert 128.0 == pytest.approx(p.throughput)
        assert p.step in (120, None)

    @pytest.mark.parametrize("line,loss,grad", [
        ("{'loss': nan, 'grad_norm': inf, 'learning_rate': 1e-05, 'epoch': 0.2}", "nan", "inf"),
        ("step 7 | loss: NaN | grad norm: 1.5 | step_time 0.8s", "nan", "1.5"),
        ("step 7 loss=nan grad_norm=-inf time=0.8s", "nan", "-inf"),
        ("iter 7: loss nan, time 80.00ms, mfu 35.12%", "nan", None),
    ])
    def test_nonfinite_figures_in_every_spelling(self, line: str, loss: str,
                                                 grad: str | None) -> None:
        """dict, key: value, key value and key=value all give the float, NaN/Inf included."""
        p = ProgressParser().parse(line)

        assert p is not None
        assert math.isnan(p.loss or 0.0) if loss == "nan" else p.loss == float(loss)
        if grad is None:
            assert p.grad_norm is None
        else:
            assert str(float(grad)) == str(p.grad_norm)

    @pytest.mark.parametrize("line", [
        "Validation DataLoader 0:  40%|████      | 50/125 [00:05<00:07, 12.69it/s]",
        "Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00,  5.27it/s]",
    ])
    def test_evaluation_bars_are_marked_eval(self, line: str) -> None:
        """Eval bars are activity, not training steps."""
        p = ProgressParser().parse(line)

        assert p is not None and p.eval

    @pytest.mark.parametrize("line", [
        "eval/loss=1.2345 eval/accuracy=0.9",
        "  loss_scale ...................................... None",
        "Saving checkpoint to /checkpoints/run-17/step_100",
        "Running tokenizer: 100%|██████████| 67349/67349 [00:04<00:00, 15120.33 examples/s]",
    ])
    def test_lines_that_are_not_training_progress(self, line: str) -> None:
        """Validation losses, argument dumps, paths and data-prep bars are not progress."""
        assert ProgressParser().parse(line) is None


class TestUserExtractors:
    def test_a_user_regex_with_named_groups_is_used_first(self) -> None:
        """A config regex (step, time_ms, loss) reads a format no built-in knows."""
        ex = Extractor.user("mytrainer", r"#(?P<step>\d+) took (?P<time_ms>[\d.]+) ms, "
                                         r"L=(?P<loss>\S+)")
        parser = ProgressParser([ex])

        p = parser.parse("#42 took 812.5 ms, L=nan")

        assert p is not None
        assert ("mytrainer", 42, 0.8125) == (p.kind, p.step, p.step_time)
        assert p.loss is not None and math.isnan(p.loss)
        assert parser.interest.search(b"#42 took 812.5 ms, L=nan") is not None

    def test_unknown_group_names_are_refused(self) -> None:
        """A typo in a group name is a config error, not a silently ignored figure."""
        with pytest.raises(ValueError, match="unknown group"):
            Extractor.user("bad", r"step (?P<stpe>\d+)")


def test_field_scan_finds_what_a_full_finditer_finds() -> None:
    """The key-word skipping field scan yields exactly ``_FIELD_RE.finditer``'s matches."""
    import random  # noqa: PLC0415

    from sigwatch.detectors.progress import _FIELD_RE, _field_matches  # noqa: PLC0415

    words = ["loss", "LOSS", "Loss", "norm", "grad", "gradient", "training", "train", "lm",
             "scale", "_", " ", "'", '"', ":", "=", "1.5", "nan", "inf", "-2e3", "x", "/", ".",
             "val", "eval/", "grad_norm", "grad norm", "gradnorm", "loss_scale", "lm loss",
             "training_loss", "'loss'", "0", "|", ",", "{", "lossnorm", "normloss", "é"]
    rng = random.Random(1)
    for _ in range(20_000):
        text = "".join(rng.choice(words) for _ in range(rng.randrange(1, 14)))
        expected = [(m.span(), m.group("key"), m.group("val")) for m in _FIELD_RE.finditer(text)]

        assert expected == [(m.span(), m.group("key"), m.group("val"))
                            for m in _field_matches(text)], text
