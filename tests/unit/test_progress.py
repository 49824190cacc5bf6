"""Progress extractors: every built-in trainer format and user-defined ones."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from support.training_logs import FORMATS, progress_lines

from sigwatch.detectors.progress import (
    F_SKIPPED,
    R_COST,
    R_FLAGS,
    R_PART,
    R_RANK,
    R_START,
    BulkProgress,
    Extractor,
    ProgressParser,
    progress_of,
)
from sigwatch.detectors.training import _skipped
from sigwatch.framing.normalize import normalize


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


class TestLossScaleReports:
    @pytest.mark.parametrize("line,attempted,scale", [
        ("Loss scaler reducing loss scale to 512.0", None, 512.0),  # torch_npu / apex
        ("Gradient overflow.  Skipping step, reducing loss scale to 1024.0", None, 1024.0),
        ("[INFO] [fused_optimizer.py:363:_update_scale] Reducing dynamic loss scale from 65536"
         " to 32768.0", 65536.0, 32768.0),  # DeepSpeed
        ("[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale:"
         " 65536.0, reducing to 32768.0", 65536.0, 32768.0),  # DeepSpeed unfused
        ("OVERFLOW! Skipping step. Attempted loss scale: 1024, reducing to 512", 1024.0, 512.0),
        ("NOTE: overflow detected, setting loss scale to: 64.0", None, 64.0),  # fairseq
        ("[fp16] loss scale was reduced from 1024 to 512", 1024.0, 512.0),
        ("lowering the loss scale to 8 after an overflow", None, 8.0),
        ("Loss scaler reducing loss scale to 32.0Loss scaler reducing loss scale to 32.0",
         None, 32.0),  # two ranks' prints glued without a newline
        ("Loss scaler reducing loss scale to 4.", None, 4.0),  # cut off
    ])
    def test_a_lowered_scale_in_every_wording_is_an_overflow(
            self, line: str, attempted: float | None, scale: float) -> None:
        """Each framework's report of a lowered loss scale: the new scale (and the one before
        it when printed), as an overflow line."""
        p = ProgressParser().parse(line)

        assert p is not None
        assert (True, attempted, scale) == (p.overflow, p.attempted_scale, p.loss_scale)

    @pytest.mark.parametrize("line,scale", [
        ("[fused_optimizer.py:353:_update_scale] Increasing dynamic loss scale from 512 to 1024",
         1024.0),
        ("loss scale: 8192.0", 8192.0),  # Megatron's field, alone on a line
        ("loss_scale=512", 512.0),
        ("epoch 3, current loss scale is 64", 64.0),
        ("Loss scale now 2048.0", 2048.0),
    ])
    def test_a_raised_or_stated_scale_is_no_overflow(self, line: str, scale: float) -> None:
        """A raised scale, or one merely stated: the scale, no overflow."""
        p = ProgressParser().parse(line)

        assert p is not None
        assert (False, scale) == (p.overflow, p.loss_scale)

    @pytest.mark.parametrize("line,step", [
        ("Gradient overflow. Skipping step", None),
        ("[INFO] [unfused_optimizer.py:281:_update_scale] Grad overflow on iteration: 13437",
         13437),
        ("[deepspeed] OVERFLOW! Rank 0 Skipping step.", None),
        (" 16%|█▍        | 1045/6400 [1:16:09<53:12,  1.68it/s][2023-02-28 20:08:24,338] [INFO]"
         " [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 64.0, reducing to"
         " 32.0", 1045),  # the bar the overflow line is glued to gives its step
    ])
    def test_an_overflow_without_its_scale(self, line: str, step: int | None) -> None:
        """An overflow reported alone (its scale on another line, if any): an overflow
        record with the step it names."""
        p = ProgressParser().parse(line)

        assert p is not None
        assert (True, step) == (p.overflow, p.step)

    @pytest.mark.parametrize("line", [
        "[fused_optimizer.py:352:_update_scale] No Grad overflow for 200 iterations",
        "[config.py:988:print]   dynamic_loss_scale_args ...... {'init_scale': 65536,"
        " 'scale_window': 1000, 'delayed_shift': 2, 'min_scale': 1}",
        "[config.py:988:print]   fp16 ......................... {'enabled': True,"
        " 'loss_scale': 0, 'initial_scale_power': 16}",
        "  min_loss_scale .................................. 1.0",
        "  loss_scale_window ............................... 1000",
        "  initial_loss_scale .............................. 4294967296",
        "Gradient overflow: see https://nvidia.github.io/apex/advanced.html",
    ])
    def test_config_dumps_and_good_news_are_no_scale_report(self, line: str) -> None:
        """Argument and config dumps, "no overflow" and a mention of overflow: nothing."""
        assert ProgressParser().parse(line) is None

    def test_a_stated_scale_of_zero_is_no_scale(self) -> None:
        """A config's "loss_scale: 0" means dynamic: no scale (and no minimum reached)."""
        p = ProgressParser().parse("loss_scale: 0")

        assert p is not None and p.loss_scale is None

    @pytest.mark.parametrize("line,epoch", [
        ("{'loss': 5.2843, 'grad_norm': 641.94, 'learning_rate': 5e-05, 'epoch': 4.7,"
         " 'num_input_tokens_seen': 25712}", 4.7),
        ("[INFO|2025-07-01 17:05:16] llamafactory.train.callbacks:143 >> {'loss': 5.2843,"
         " 'learning_rate': 5.0000e-05, 'epoch': 4.70, 'throughput': 813.70}", 4.7),
        ('{"current_steps": 10, "loss": 2.1, "epoch": 0.05}', 0.05),
    ])
    def test_the_epoch_of_a_loss_dict(self, line: str, epoch: float) -> None:
        """Hugging Face's fraction of epochs done, however the dict is prefixed."""
        p = ProgressParser().parse(line)

        assert p is not None and p.epoch == pytest.approx(epoch)


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


# -- the whole-chunk pass ------------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _per_line(data: bytes) -> dict[tuple[int, int], Any]:
    """What the per-line path makes of every line: (line start, part) -> (rank, progress)."""
    parser = ProgressParser()
    out: dict[tuple[int, int], Any] = {}
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        for k, (rank, text) in enumerate(normalize(data[start:end].decode("utf-8", "replace"))):
            out[(start, k)] = (rank, parser.parse(text))
        start = end + 1
    return out


def _assert_bulk_is_per_line(data: bytes) -> int:
    """Every record the whole-chunk pass reads equals the per-line parse of that part, and
    every part of an accepted line is one of its records. Returns the records checked."""
    bulk = BulkProgress().parse(data)
    reference = _per_line(data)
    records = bulk.records()
    got = {(r[R_START], r[R_PART]): r for r in records}
    for start, _end in bulk.lines:
        parts = [k for (s, k) in reference if s == start]
        assert [(start, k) for k in parts] == [(start, k) for k in parts if (start, k) in got], \
            data[start:_end]
    for key, rec in got.items():
        rank, progress = reference[key]
        line = data[key[0]:data.find(b"\n", key[0])]
        assert progress is not None, line
        assert (rank, progress) == (rec[R_RANK], progress_of(rec)), line
        assert rec[R_COST] == progress.cost
        text = normalize(line.decode("utf-8", "replace"))[key[1]][1]
        assert bool(rec[R_FLAGS] & F_SKIPPED) == _skipped(text)  # the bad-numbers test
    return len(records)


def _megatron_variant(rng: random.Random) -> str:
    step = rng.randrange(1, 10**7)
    items = [f" consumed samples: {rng.randrange(10**9):>12d} |"]
    if rng.random() < 0.3:
        items.append(f" consumed tokens: {rng.randrange(10**12):>12d} |")
    items.append(f" elapsed time per iteration (ms): {rng.uniform(0, 20000):.{rng.choice([0, 1, 2])}f} |")
    if rng.random() < 0.2:
        items.append(f" throughput per GPU (TFLOP/s/GPU): {rng.uniform(0, 400):.1f} |")
    items.append(f" learning rate: {rng.uniform(0, 1e-3):.6E} |")
    items.append(f" global batch size: {rng.randrange(1, 4096):>5d} |")
    loss = rng.choice([f"{rng.uniform(0, 12):.6E}", "nan", "inf", "-1.5E+00", None])
    if loss is not None:
        items.append(f" lm loss: {loss} |")
    if rng.random() < 0.5:
        items.append(f" loss scale: {rng.choice([1.0, 2048.0, 65536.0, 0.5]):.1f} |")
    if rng.random() < 0.8:
        items.append(f" grad norm: {rng.choice([f'{rng.uniform(0, 9):.3f}', 'nan', 'inf'])} |")
    if rng.random() < 0.2:
        items.append(f" params norm: {rng.uniform(100, 900):.3f} |")
    if rng.random() < 0.2:
        items.append(f" actual seqlen: {rng.randrange(1, 8192):>5d} |")
    items.append(f" number of skipped iterations: {rng.choice([0, 0, 0, 1, 3, 10]):>3d} |")
    items.append(f" number of nan iterations: {rng.choice([0, 0, 2]):>3d} |")
    if rng.random() < 0.2:
        items.append(f" samples per second: {rng.uniform(1, 999):.3f} | TFLOPs: 123.4 |")
    if rng.random() < 0.1:  # another key: not a shape the pass knows
        rng.shuffle(items)
    stamp = (f" [2024-06-02 {rng.randrange(24):02d}:{rng.randrange(60):02d}:"
             f"{rng.randrange(60):02d}]" if rng.random() < 0.7 else "")
    return f"{stamp} iteration {step:>8d}/ {rng.randrange(10**7):>8d} |{''.join(items)}"


def _hf_variant(rng: random.Random) -> str:
    loss = rng.choice([f"{rng.uniform(0, 5):.4f}", "nan", "inf", "0.1", "3"])
    keys = [f"'loss': {loss}"]
    if rng.random() < 0.7:
        keys.append(f"'grad_norm': {rng.choice([rng.uniform(0, 9), 1e-5, 12345.678])}")
    keys.append(f"'learning_rate': {rng.choice([rng.uniform(0, 1e-4), 5e-05, 0.0])}")
    if rng.random() < 0.8:
        keys.append(f"'epoch': {rng.uniform(0, 9):.2f}")
    if rng.random() < 0.1:
        keys.append("'train_runtime': 1234.5")
    return "{" + ", ".join(keys) + "}"


def _tqdm_variant(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.choice([1, 1, 2, 4])):
        pct = rng.randrange(101)
        bar = "█" * (pct // 10) + rng.choice(["", "▏", "▌"]) + " " * (10 - pct // 10)
        desc = rng.choice(["", "Epoch 3: ", "Epoch 12: ", "Validation: ", "Training: "])
        rate = rng.choice([f"{rng.uniform(0, 20):.2f}it/s", f"{rng.uniform(0, 20):.2f}s/it",
                           "?it/s", "0.00it/s"])
        post = rng.choice(["", ", loss=0.69", ", loss=0.690, v_num=0", ", v_num=1, train_loss=1.2",
                           ", loss=nan", ", train_loss_step=0.5", ", lr=1e-05, loss=2.5e+00"])
        parts.append(f"{desc}{pct:3d}%|{bar}| {rng.randrange(9999)}/{rng.randrange(9999)}"
                     f" [00:{rng.randrange(60):02d}<{rng.choice(['01:02', '?'])}, {rate}{post}]")
    lead = rng.choice(["", "\r", "\r\r"])
    return lead + "\r".join(parts) + rng.choice(["", "\r"])


class TestBulkProgress:
    @pytest.mark.parametrize("seed", range(4))
    def test_generated_variants_read_as_the_per_line_parse_reads_them(self, seed: int) -> None:
        """Megatron lines with optional and shuffled items, HF dicts with other keys, tqdm
        bars with descriptions, rates and postfixes, NaN and Inf, launcher tags, ANSI colours:
        whatever the pass accepts is exactly what the per-line parse makes of it."""
        rng = random.Random(seed)
        rows = []
        for _ in range(3000):
            row = rng.choice([_megatron_variant, _hf_variant, _tqdm_variant])(rng)
            tag = rng.random()
            if tag < 0.3:
                row = f"[rank{rng.randrange(64)}]:{rng.choice(['', ' ', '  '])}{row}"
            elif tag < 0.35:
                row = f"[default{rng.randrange(8)}]: {row}"
            elif tag < 0.4:
                row = f"{rng.randrange(16)}: {row}"
            elif tag < 0.45:
                row = f"\x1b[32m{row}\x1b[0m"
            elif tag < 0.5:
                row = f"[rank1]: [Rank 0] {row}"
            rows.append(row)
        data = ("\n".join(rows) + "\n").encode()

        checked = _assert_bulk_is_per_line(data)

        assert checked > 500  # a good share of the variants is accepted

    def test_the_training_log_corpus(self) -> None:
        """Every healthy and incident training log of the corpus."""
        checked = 0
        for folder in ("goodlogs", "incidents"):
            for path in sorted((CORPUS / folder).glob("*.log")):
                data = path.read_bytes()
                if not data.endswith(b"\n"):
                    data += b"\n"
                checked += _assert_bulk_is_per_line(data)

        assert checked > 100

    def test_lines_with_nan_or_another_key_are_left_to_the_per_line_parse(self) -> None:
        """A NaN loss, an unknown dict key, a rate of '?it/s': not accepted."""
        data = ("{'loss': nan, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
                "{'loss': 0.5, 'num_tokens': 12.0, 'learning_rate': 1e-05, 'epoch': 0.1}\n"
                "Epoch 0:   0%|          | 0/100 [00:00<?, ?it/s]\n").encode()

        assert [] == BulkProgress().parse(data).lines


class TestNotProgressCache:
    def test_a_line_known_as_no_progress_stays_so_whatever_its_digits(self) -> None:
        """The cache of texts that parse to nothing (by shape, digits as 0) answers what the
        parse itself answers, for texts with other digits (a rate of 0 it/s included: such
        lines are never cached)."""
        rng = random.Random(2)
        templates = ["2024-06-02 11:22:33,444 - INFO - train.py:{a} - Saving checkpoint to"
                     " /ckpt/step_{b}", "eval/loss={a}.{b} eval/accuracy=0.{a}",
                     "step {a} loss {b}.5", "step {a} | time {b} ms", "iter {a}: done",
                     "step {a} {b}.0 samples/s", "batch {a} of {b}", "step {a} {r} it/s",
                     "batch {a}/{b} {r}it/s"]
        cached = ProgressParser()
        for _ in range(4000):
            text = rng.choice(templates).format(a=rng.randrange(10**rng.randrange(1, 6)),
                                                b=rng.randrange(10**rng.randrange(1, 6)),
                                                r=rng.choice(["0.00", "1.50", "0.01", "10"]))
            assert ProgressParser()._parse(text) == cached.parse(text), text
