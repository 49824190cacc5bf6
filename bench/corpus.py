"""Deterministic generator of a large, realistic training log for the benchmark.

The background is what a long healthy run prints: Megatron-style iteration lines, Hugging Face
loss dicts behind torchrun ``[rankN]:`` prefixes, tqdm bars rewritten with ``\\r``, NCCL INFO
chatter, Python warnings, and lines sampled from the benign corpus in ``tests/corpus/goodlogs``
(which is full of near misses: "error", "nan", "Xid", "SIGTERM" in benign context). Into it go,
at a fixed rate, the ``match`` and ``no_match`` examples of the signatures under test, sometimes
behind a rank prefix or ANSI colour, and the steps of multi-step signatures a few lines apart.

Same arguments, same bytes: the generator only uses ``random.Random(seed)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOODLOGS = ROOT / "tests" / "corpus" / "goodlogs"

__all__ = ["generate", "goodlog_lines", "lines"]


def goodlog_lines() -> list[bytes]:
    """Every line of the benign corpus (bytes kept exactly, ``\\r`` and invalid UTF-8 too)."""
    out: list[bytes] = []
    for path in sorted(GOODLOGS.glob("*.log")):
        out.extend(line for line in path.read_bytes().split(b"\n") if line)
    return out


def _iteration(rng: random.Random, step: int) -> bytes:
    return (
        f" [2024-06-02 {rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}]"
        f" iteration {step:>8d}/  500000 | consumed samples: {step * 1024:>12d} |"
        f" elapsed time per iteration (ms): {rng.uniform(800, 12000):.1f} |"
        f" learning rate: {rng.uniform(1e-5, 3e-4):.6E} | global batch size:  1024 |"
        f" lm loss: {rng.uniform(1.5, 8):.6E} | loss scale: 1.0 |"
        f" grad norm: {rng.uniform(0.1, 3):.3f}"
        f" | number of skipped iterations:   0 | number of nan iterations:   0 |"
    ).encode()


def _hf_dict(rng: random.Random, step: int) -> bytes:
    rank = rng.randrange(8)
    return (
        f"[rank{rank}]: {{'loss': {rng.uniform(0.2, 3):.4f},"
        f" 'grad_norm': {rng.uniform(0.1, 9):.6f},"
        f" 'learning_rate': {rng.uniform(1e-6, 5e-5):.4e}, 'epoch': {step / 3000:.2f}}}"
    ).encode()


def _tqdm(rng: random.Random, step: int) -> bytes:
    total = 3000
    parts = []
    for k in range(rng.randrange(2, 6)):
        done = min(total, step % total + k)
        pct = done * 100 // total
        filled = pct // 10
        bar = "█" * filled + " " * (10 - filled)
        parts.append(
            f"Epoch {step // total}: {pct:3d}%|{bar}| {done}/{total} "
            f"[{rng.randrange(60):02d}:{rng.randrange(60):02d}<{rng.randrange(60):02d}:"
            f"{rng.randrange(60):02d}, {rng.uniform(1, 9):.2f}it/s, loss={rng.uniform(0.5, 3):.3f},"
            f" v_num=0]")
    return "\r".join(parts).encode()


def _nccl(rng: random.Random, _step: int) -> bytes:
    node = rng.randrange(64)
    rank = rng.randrange(8)
    what = rng.choice([
        f"Channel {rng.randrange(32):02d}/32 :    0   1   2   3   4   5   6   7",
        f"Channel {rng.randrange(32):02d}/0 : {rank}[{rank}] -> {(rank + 1) % 8}[{(rank + 1) % 8}]"
        " via P2P/CUMEM/read",
        "Connected all rings",
        "Connected all trees",
        f"comm 0x{rng.getrandbits(40):x} rank {rank} nRanks 64 nNodes 8 localRanks 8 localRank"
        f" {rank} MNNVL 0",
        "NVLS multicast support is available on dev 0",
        f"ncclCommInitRank comm 0x{rng.getrandbits(40):x} rank {rank} nranks 64 cudaDev {rank}"
        f" nvmlDev {rank} busId {rng.randrange(16, 255):x}000 commId 0x{rng.getrandbits(60):x}"
        " - Init COMPLETE",
    ])
    return f"gpu-node-{node:03d}:{rng.randrange(40000, 60000)}:{rng.randrange(40000, 60000)}" \
           f" [{rank}] NCCL INFO {what}".encode()


def _logging(rng: random.Random, step: int) -> bytes:
    level = rng.choice(["INFO", "INFO", "INFO", "DEBUG", "WARNING"])
    msg = rng.choice([
        f"Saving checkpoint to /checkpoints/run-17/step_{step}",
        f"throughput: {rng.uniform(1000, 90000):.1f} tokens/s, mfu: {rng.uniform(0.2, 0.6):.3f}",
        f"dataloader: prefetch queue {rng.randrange(64)}/64, worker {rng.randrange(16)} idle",
        f"eval/loss={rng.uniform(0.5, 3):.4f} eval/accuracy={rng.uniform(0.5, 1):.4f}",
        f"memory: allocated {rng.uniform(10, 70):.2f} GiB, reserved {rng.uniform(70, 79):.2f} GiB",
        "timeout for collective set to 1800 seconds",
        f"skipped {rng.randrange(3)} batches with empty sequences",
    ])
    return (f"2024-06-02 {rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d},"
            f"{rng.randrange(1000):03d} - {level} - train.py:{rng.randrange(10, 900)} - {msg}"
            ).encode()


def _ansi(rng: random.Random, step: int) -> bytes:
    return (f"\x1b[32m{step:>7d}\x1b[0m \x1b[1mtrain_loss\x1b[0m={rng.uniform(0.2, 3):.4f} "
            f"\x1b[2mval_error\x1b[0m={rng.uniform(0, 0.2):.4f}").encode()


_BACKGROUND = [(_iteration, 22), (_hf_dict, 22), (_tqdm, 12), (_nccl, 14), (_logging, 16),
               (_ansi, 4)]


def _decorate(rng: random.Random, text: str) -> bytes:
    roll = rng.random()
    if roll < 0.25:
        text = f"[rank{rng.randrange(64)}]: {text}"
    elif roll < 0.35:
        text = f"{rng.randrange(16)}: {text}"
    elif roll < 0.42:
        text = f"\x1b[31m{text}\x1b[0m"
    elif roll < 0.47:
        text = f"Epoch 1:  12%|█▏        | 371/3000\r{text}"
    return text.encode()


def _injections(signatures: Sequence[object]) -> tuple[list[list[str]], list[str]]:
    """(match blocks, no_match lines) from the signatures' embedded examples."""
    blocks: list[list[str]] = []
    near: list[str] = []
    for sig in signatures:
        for ex in sig.examples:  # type: ignore[attr-defined]
            if "\n" in ex.text:
                lines = ex.text.split("\n")
            else:
                lines = [ex.text]
            if ex.kind == "match":
                blocks.append(lines)
            else:
                near.extend(lines)
    return blocks, near


def lines(signatures: Sequence[object], seed: int = 5, inject_every: int = 2000,
          ) -> Iterator[bytes]:
    """Endless deterministic stream of log lines (without newline)."""
    rng = random.Random(seed)
    good = goodlog_lines()
    blocks, near = _injections(signatures)
    gens = [g for g, w in _BACKGROUND for _ in range(w)]
    step = 0
    while True:
        step += 1
        roll = rng.random()
        if blocks and roll < 1 / inject_every:
            block = rng.choice(blocks)
            for i, text in enumerate(block):
                yield _decorate(rng, text)
                if i + 1 < len(block):
                    for _ in range(rng.randrange(3)):
                        yield _iteration(rng, step)
            continue
        if near and roll < 2 / inject_every:
            yield _decorate(rng, rng.choice(near))
            continue
        if roll < 0.10:
            yield rng.choice(good)
            continue
        yield rng.choice(gens)(rng, step)


def generate(path: Path, size: int, signatures: Sequence[object], seed: int = 5,
             inject_every: int = 2000) -> int:
    """Write about ``size`` bytes of whole lines to ``path``; returns the number of lines."""
    count = 0
    written = 0
    buf: list[bytes] = []
    buffered = 0
    with path.open("wb") as fh:
        for line in lines(signatures, seed, inject_every):
            buf.append(line)
            buffered += len(line) + 1
            count += 1
            if buffered >= 1 << 20:
                fh.write(b"\n".join(buf) + b"\n")
                written += buffered
                buf.clear()
                buffered = 0
                if written >= size:
                    break
        if buf:
            fh.write(b"\n".join(buf) + b"\n")
    return count
