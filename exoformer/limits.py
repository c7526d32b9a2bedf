"""Input limits: every bound a registry file, a profile, reported.yaml or a `--set` value must respect.

One place for the numbers (docs/input-limits.md lists them for users). A small file must never exhaust
the machine: YAML is composed under a depth and an expansion budget before any Python object is built,
sweeps are sized before they are expanded, and names are short enough to be directory names. Numbers must
be finite and inside the range the trainer can use. Torch-free and dependency-free, so the model and
train configs can use the same checks.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from exoformer.errors import UserError

MAX_FILE_BYTES = 1 << 20
"""Largest YAML file read (1 MiB; the shipped registry's largest file is ~40 KB)."""
MAX_DEPTH = 64
"""Deepest nesting of YAML mappings/sequences (the shipped files nest at most 6 deep)."""
MAX_ALIASES = 1_000
"""Alias uses (`*name`) per YAML document."""
MAX_NODES = 200_000
"""YAML nodes per document after expanding every alias (an alias bomb is caught here, while composing)."""
MAX_SWEEP_POINTS = 10_000
"""Points of one sweep grid (product of its axis lengths), checked before expanding it."""
MAX_SPECS = 10_000
"""Specs in one registry, all files and sweeps together."""
MAX_NAME_LEN = 100
"""Longest name of a spec, group, table, figure, preset, shape, metric, row or grid label."""
NAME_CHARS = "[a-z0-9][a-z0-9._-]*"
"""Name charset: lowercase letters, digits, '.', '_', '-', starting with a letter or digit (no glob characters,
no path separators, no whitespace or newline)."""
NAME_RE = re.compile(rf"\A{NAME_CHARS}\Z")
MAX_INT = 2 ** 63
"""Integers lie in [-2**63, 2**63) (what torch and numpy can hold); floats must be finite."""
SEED_MAX = 2 ** 32
"""Seeds lie in [0, 2**32) (what numpy and torch generators accept)."""


def check_name(name: Any, *, where: str, what: str = "spec name") -> str:
    """A valid name, or a one-line UserError saying which rule it breaks."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 40 else repr(name[:40] + "...")
        raise UserError(f"invalid {what} {shown}", where=where,
                        fix="use lowercase letters, digits, '.', '_' and '-', starting with a letter or digit")
    if len(name) > MAX_NAME_LEN:
        raise UserError(f"{what} {name[:40] + '...'!r} is {len(name)} characters long", where=where,
                        fix=f"use at most {MAX_NAME_LEN} characters")
    return name


def check_finite(value: Any, *, where: str) -> Any:
    """Reject NaN and infinities (they cannot be hashed and poison training)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"must be a finite number, got {value!r}", where=where,
                        fix="write a finite number (not .nan or .inf)")
    return value


def check_range(value: float, *, where: str, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False, fix: str | None = None) -> None:
    """`value` inside [low, high] (open ends where asked); a one-line UserError naming the interval otherwise."""
    check_finite(value, where=where)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        interval = f"{left}{'-inf' if low is None else _num(low)}, {'inf' if high is None else _num(high)}{right}"
        raise UserError(f"must lie in {interval}, got {value!r}", where=where,
                        fix=fix or f"choose a value in {interval}")


def _num(x: float) -> str:
    return "2**32" if x == SEED_MAX else repr(x)


def check_seed(value: Any, *, where: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        check_range(value, where=where, low=0, high=SEED_MAX, high_open=True, fix="use a seed in [0, 2**32), e.g. 42")


SIZE_BOUNDS: dict[str, int] = {
    "model.n_layer": 1_024,
    "model.d_model": 65_536,
    "model.n_head": 1_024,
    "model.vocab_size": 4_194_304,
    "model.seq_len": 1_048_576,
    "model.mlp_ratio": 64,
    "model.dynamic_hidden": 65_536,
    "train.steps": 100_000_000,
    "train.batch_tokens": 1 << 30,
    "train.micro_batch_seqs": 65_536,
    "train.seq_len": 1_048_576,
    "train.val_batches": 1_000_000,
    "train.final_val_tokens": 1_000_000_000_000,
    "train.checkpoint_every": 100_000_000,
    "train.keep_checkpoints": 1_000,
    "train.warmup_steps": 100_000_000,
    "train.muon_momentum_steps": 100_000_000,
    "train.val_every": 100_000_000,
    "eval.batch_size": 65_536,
    "eval.num_fewshot": 100,
    "eval.limit": 100_000_000,
    "analysis.n_sequences": 65_536,
    "analysis.seq_len": 1_048_576,
}
"""Upper bound of every size field (docs/input-limits.md "Sizes"): far above the paper's largest setting (1B
model, 76,294 steps of 262,144 tokens), far below what would exhaust a machine before any check could run."""
MAX_PARAMETERS = 1_000_000_000_000
"""Parameters of one model (10**12, 1,000x the paper's largest): checked on the config, before anything is built."""


def check_size(value: Any, *, where: str) -> None:
    """A size field at most its bound in SIZE_BOUNDS (`where` is its `section.field` name)."""
    bound = SIZE_BOUNDS.get(where)
    if bound is not None and isinstance(value, int) and not isinstance(value, bool) and value > bound:
        raise UserError(f"{value:,} is above the limit of {bound:,}", where=where,
                        fix=f"use at most {bound:,} (docs/input-limits.md)")


MAX_INCLUDE_LEN = 1024
"""Longest `include:` entry of a registry file (a relative path inside the registry directory)."""
MAX_PATH_BYTES = 4096
"""Linux's PATH_MAX: no path the kernel is given may be longer."""
RUN_PATH_RESERVE = 256
"""Bytes a runs root must leave for what lies below it: `<spec>/<hash12>/checkpoints/.<file>.<random>.tmp`."""
MAX_COMPONENT_BYTES = 255
"""Linux's NAME_MAX: the longest name of one directory or file."""


def check_runs_root_path(root: Any, *, where: str = "--runs-dir") -> None:
    """A runs root short enough that every file of every run below it can still be named."""
    text = str(root)
    size = len(os.fsencode(text))
    if size > MAX_PATH_BYTES - RUN_PATH_RESERVE:
        raise UserError(f"the runs root path is {size:,} bytes long; the files of a run below it would exceed the "
                        f"{MAX_PATH_BYTES:,}-byte path limit", where=where,
                        fix=f"choose a runs root of at most {MAX_PATH_BYTES - RUN_PATH_RESERVE:,} bytes")
    longest = max((len(os.fsencode(part)) for part in text.split("/")), default=0)
    if longest > MAX_COMPONENT_BYTES:
        raise UserError(f"a directory name in the runs root is {longest} bytes long (the limit is "
                        f"{MAX_COMPONENT_BYTES})", where=where, fix="choose a runs root with shorter directory names")


DEFAULT_ITEM_RESAMPLES = 2000
"""--bootstrap's default (exoformer/report/stats/replication.py): here, so that building the command line needs no scipy."""

OPTION_BOUNDS: dict[str, tuple[float, float]] = {
    "--bootstrap": (200, 100_000),
    "--jobs": (1, 1_024),
    "--threads": (1, 1_024),
    "--timeout-min": (0, 525_600),
    "--interval": (0, 86_400),
}
"""Numeric command-line option -> (low, high) (docs/input-limits.md "Options"): integers in [low, high], numbers of
minutes or seconds in (low, high]. Fewer than 200 bootstrap resamples give a percentile interval noisier than its
width; more buy nothing but time past 100,000."""


def check_option(value: Any, option: str) -> Any:
    """`value` of a numeric option inside OPTION_BOUNDS[option]; a one-line UserError naming the option otherwise."""
    low, high = OPTION_BOUNDS[option]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if option not in ("--timeout-min", "--interval"):
        if not (is_number and float(value).is_integer() and low <= value <= high):
            raise UserError(f"must be an integer in [{low:,}, {high:,}], got {value!r}", where=option,
                            fix=f"use {option} {low if option != '--bootstrap' else DEFAULT_ITEM_RESAMPLES}")
        return int(value)
    if not (is_number and math.isfinite(value) and low < value <= high):
        raise UserError(f"must be a number in ({low:g}, {high:,}], got {value!r}", where=option,
                        fix=f"e.g. {option} {60 if option == '--timeout-min' else 5}")
    return value
