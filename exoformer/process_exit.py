"""A process that loaded torch, lm-eval and datasets spends over a second in the interpreter's shutdown, in garbage
collections that walk every object those libraries made at import, and the next local job or the main job's table
waits for it: 1.4 CPU-s, and 0.43 with the handler below (benchmarks/bench_process_exit.py).

`collect_then_freeze_at_exit` registers, once per process, an exit handler that collects the garbage there is
(finalisers of cyclic garbage run as before) and then moves what is still alive into gc's permanent generation,
so the shutdown's collections skip it. Module teardown still frees those objects by reference count, and exit
handlers registered before this one (logging's flush and close among them) still run after it.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def collect_then_freeze_at_exit() -> None:
    """Register `_collect_then_freeze` to run at interpreter exit (once, however often this is called)."""
    global _registered
    if not _registered:
        atexit.register(_collect_then_freeze)
        _registered = True


def _collect_then_freeze() -> None:
    gc.collect()
    gc.freeze()
