"""A process that loaded torch, lm-eval and datasets spends a long shutdown in garbage collections that walk every
object those libraries made at import, and the next job waits for it. Collecting once at exit and then freezing
what is still alive lets the shutdown's collections skip it; module teardown still frees those objects by
reference count, and exit handlers registered before this one (logging's among them) still run after it.
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
