"""The inline backend: each pipeline in the launcher's own process, one after the other (tests, debugging, pdb)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from exoformer.runs import locking
from exoformer.runs.backends.base import Item, Liveness, launcher_liveness
from exoformer.registry.spec import Spec
from exoformer.rundir import Status


class InlineBackend:
    name = "inline"
    waits = True
    submits_under_lock = False
    on_this_machine = True
    parallel_jobs = 0  # the job's own training line owns the terminal
    profile = None
    orders_branches = True  # one job after another, in plan order: a decay branch's parent is done before it

    def check(self, specs: list[Spec]) -> None:
        return None

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        from exoformer.runs.pipeline import run_inline

        for item in items:
            run_inline(item.run_dir, item.spec)
            if on_done:
                on_done(item)

    @classmethod
    def liveness(cls, claim: locking.Claim | None, status: Status, view: object) -> Liveness:
        return launcher_liveness(claim)
