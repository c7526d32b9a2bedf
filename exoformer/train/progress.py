"""What a training run shows while it runs: step, loss, tokens/s and ETA (rank 0 only).

On a terminal (stderr) one line is rewritten in place; otherwise a plain line goes to stdout (a job's log) every
~2% of the run, so logs stay short and greppable and stderr keeps only errors. The ETA is the mean step time of this attempt times the steps left
(steps resumed from a checkpoint are not counted as fast ones).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    def __init__(self, total: int, enabled: bool, *, stream: TextIO | None = None, log: TextIO | None = None,
                 tty: bool | None = None, clock=time.perf_counter) -> None:
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.log = log
        self.tty = enabled and (self.stream.isatty() if tty is None else tty)
        self.every = max(1, total // 50)
        self.clock = clock
        self._start: tuple[int, float] | None = None

    def line(self, step: int, *, loss: float, tokens_per_s: float, lr: float | None = None) -> str:
        """`step 120/150 loss 1.2345 12,345 tok/s ETA 0:12` (the ETA once a step of this attempt has passed)."""
        now = self.clock()
        if self._start is None:
            self._start = (step - 1, now)
        first_step, first_time = self._start
        done = step - first_step
        eta = (now - first_time) / done * (self.total - step) if done > 0 and now > first_time else None
        text = f"step {step}/{self.total} loss {loss:.4f} {tokens_per_s:,.0f} tok/s"
        if lr is not None:
            text += f" lr {lr:.2e}"
        return text + (f" ETA {duration(eta)}" if eta is not None and step < self.total else "")

    def update(self, step: int, *, loss: float, tokens_per_s: float, lr: float | None = None) -> None:
        if not self.enabled:
            return
        text = self.line(step, loss=loss, tokens_per_s=tokens_per_s, lr=lr)
        if self.tty:
            self.stream.write(f"\r\033[K{text}" + ("\n" if step == self.total else ""))
            self.stream.flush()
        elif step % self.every == 0 or step == self.total:
            print(text, file=self.log or sys.stdout, flush=True)

    def note(self, text: str) -> None:
        if self.enabled:
            print(("\n" if self.tty else "") + text, flush=True)
