"""lm-eval's prompt templates compiled once per evaluation instead of once per document field.

lm-eval 0.4.13's `lm_eval.utils.apply_template` calls `env.from_string(template)` at every call, and a task calls
it for each document's text, target and choices: the smoke suite's evaluation at 5 shots compiled 11,544 Jinja
templates (a few dozen distinct ones), a third of the evaluate stage's CPU time
(benchmarks/bench_main_job.py). `compiled_templates()` swaps in the same function with the compiled template
kept per template string, in lm-eval's own Jinja environment, so every prompt renders to the same string.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import lru_cache


@contextlib.contextmanager
def compiled_templates() -> Iterator[None]:
    """For the duration: `lm_eval.utils.apply_template` compiles each distinct template once; restored after."""
    from lm_eval import utils

    original = utils.apply_template
    compile_once = lru_cache(maxsize=1024)(utils.env.from_string)

    def apply_template(template: str, doc: dict) -> str:
        return compile_once(template).render(**doc)

    utils.apply_template = apply_template
    try:
        yield
    finally:
        utils.apply_template = original
