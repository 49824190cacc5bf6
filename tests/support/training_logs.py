"""Generated training logs in the progress formats the extractors know.

``progress_lines(fmt, step, step_time, loss)`` renders one step the way that trainer prints it;
``run(fmt, steps, ...)`` makes a whole run with deterministic jitter, so tests can say "step
time triples at step 200" or "loss is NaN from step 150".
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["FORMATS", "MI300_ROCM_630_HEADER", "progress_lines", "run"]

FORMATS = ("megatron", "hf_trainer", "lightning", "lightning_rich", "deepspeed", "nanogpt",
           "plain", "keras")

MI300_ROCM_630_HEADER = [
    "ROCm version: 6.3.0",
    "torch 2.6.0 | HIP version 6.3.42131 | devices: 8 x AMD Instinct MI300X",
    "MIOpen(HIP): Info [get_device_name] Raw device name: gfx942:sramecc+:xnack-",
]


def _num(x: float) -> str:
    return "nan" if x != x else f"{x:.4f}"  # noqa: PLR0124 - NaN check


def progress_lines(fmt: str, step: int, step_time: float, loss: float,
                   grad_norm: float = 1.0) -> list[str]:
    """The line(s) one training step prints in ``fmt``."""
    total = 100_000
    if fmt == "megatron":
        return [(f" iteration {step:>8d}/  {total} | consumed samples: {step * 512:>12d} |"
                f" elapsed time per iteration (ms): {step_time * 1000:.1f} |"
                f" learning rate: 1.500000E-04 | global batch size:   512 |"
                f" lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {grad_norm:.3f} |"
                f" number of skipped iterations:   0 | number of nan iterations:   0 |")]
    if fmt == "hf_trainer":
        pct = step * 100 // total
        out = [f"{pct:3d}%|▏         | {step}/{total} [01:02<9:59:00,  {1 / step_time:.2f}it/s]"]
        if step % 5 == 0:
            out.append(f"{{'loss': {_num(loss)}, 'grad_norm': {_num(grad_norm)},"
                       f" 'learning_rate': 1.9e-05, 'epoch': {step / 1000:.2f}}}")
        return out
    if fmt == "lightning":
        return [(f"Epoch 0:   7%|▋         | {step}/{total} [00:12<02:51,  {1 / step_time:.2f}it/s,"
                f" v_num=0, train_loss={_num(loss)}]")]
    if fmt == "lightning_rich":
        return [(f"Epoch 0/9 ━━━━━━━━━━╸━━━━━━ {step}/{total} 0:01:23 • 0:09:52"
                f" {1 / step_time:.2f}it/s v_num: 0 train_loss: {_num(loss)}")]
    if fmt == "deepspeed":
        return [(f"[2024-03-18 14:02:27,542] [INFO] [logging.py:96:log_dist] [Rank 0]"
                f" step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]"),
                (f"[2024-03-18 14:02:27,600] [INFO] [timer.py:260:stop] epoch=0/micro_step={step}"
                f"/global_step={step}, RunningAvgSamplesPerSec={64 / step_time:.3f},"
                f" CurrSamplesPerSec={64 / step_time:.3f}, MemAllocated=4.2GB,"
                f" MaxMemAllocated=9.1GB")]
    if fmt == "nanogpt":
        return [f"iter {step}: loss {_num(loss)}, time {step_time * 1000:.2f}ms, mfu 35.12%"]
    if fmt == "plain":
        return [(f"step {step:>6d} | loss {_num(loss)} | grad_norm {_num(grad_norm)} |"
                f" step_time {step_time:.3f}s")]
    if fmt == "keras":
        return [(f"{step}/{total} - 12s - {step_time * 1000:.0f}ms/step - loss: {_num(loss)}"
                f" - val_loss: 1.1670")]
    raise ValueError(fmt)


def run(fmt: str, steps: int, *, start: int = 1, base: float = 0.8,
        slow_from: int | None = None, slowdown: float = 3.0,
        nan_from: int | None = None, nan_to: int | None = None,
        extra: Callable[[int], list[str]] | None = None, seed: int = 1) -> list[str]:
    """Lines of a run: 3% jitter on ``base`` seconds per step, optional slowdown and NaNs."""
    rng = random.Random(seed)
    out: list[str] = []
    for step in range(start, start + steps):
        t = base * (1 + rng.gauss(0, 0.03))
        if slow_from is not None and step >= slow_from:
            t *= slowdown
        loss = 3.0 - step * 1e-4 + rng.gauss(0, 0.01)
        if nan_from is not None and step >= nan_from and (nan_to is None or step < nan_to):
            loss = float("nan")
        if extra is not None:
            out.extend(extra(step))
        out.extend(progress_lines(fmt, step, t, loss))
    return out
