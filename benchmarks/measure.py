"""Shared measuring helpers of the benchmarks: peak memory of one call, device sync, synthetic eval requests.

Peak memory is the most memory the call held above what was held when it started: on CUDA the caching
allocator's peak counter; on Linux CPUs the process's resident-set high-water mark (VmHWM), reset before
the call through /proc/self/clear_refs. Elsewhere it is None (reported as unavailable, never guessed).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _rss_kib(field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _reset_cpu_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        return False
    return True


def measure(fn: Callable[[], Any], device: torch.device | str) -> tuple[Any, float, int | None]:
    """(fn's result, wall seconds, peak bytes held above the start, or None where unmeasurable)."""
    device = torch.device(device)
    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base = _rss_kib("VmRSS") if _reset_cpu_peak() else None
    start = time.perf_counter()
    result = fn()
    sync(device)
    elapsed = time.perf_counter() - start
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base
    else:
        high = _rss_kib("VmHWM")
        peak = None if base is None or high is None else max(0, high - base) * 1024
    return result, elapsed, peak


def token_requests(n: int, seq_len: int, vocab_size: int, *, continuation: tuple[int, ...] = (1, 2, 4, 8),
                   seed: int = 0) -> list[tuple[None, list[int], list[int]]]:
    """`n` (key, context, continuation) token requests that fill the model's window (context + continuation
    = seq_len + 1 tokens, the last only predicted), with short continuations, like multiple-choice tasks."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        cont = continuation[i % len(continuation)]
        tokens = torch.randint(1, vocab_size, (seq_len + 1,), generator=g).tolist()
        out.append((None, tokens[:-cont], tokens[-cont:]))
    return out


def mib(n_bytes: int | None) -> float | None:
    return None if n_bytes is None else round(n_bytes / 2**20, 1)
