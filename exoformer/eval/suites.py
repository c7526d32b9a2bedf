"""Task suites as lm-eval task configs (dicts usable as `simple_evaluate(tasks=...)`).

`paper`: the paper's six tasks (docs/official_code.md section 5) with lm-eval 0.4.13's own configs, read from
the YAMLs inside the installed package by lm-eval's own loader, so `include:` is merged and `!function`
resolves to the real helpers (HellaSwag's `process_docs`, WinoGrande's partial-scoring functions).
With `data_dir`, the same configs are re-pointed at `<data_dir>/<task>/<split>.jsonl` (what
`prefetch` writes), so compute nodes evaluate offline. lm-eval pitfalls handled here
(docs/feasibility.md section 2): every split a config names gets a file (few-shot docs come from `train`),
paths are absolute (relative ones resolve against the working directory), and `data_files` is a mapping
(a single path would become a `train` split).

`smoke`: the same six configs, renamed `smoke_<task>` and pointed at the small JSONL files committed under
`exoformer/eval/smoke_data/` (verified against their checksums first). Every local task file is also read
once as JSONL before lm-eval sees it, so a truncated one is an error naming file:line. Prompts, choices, targets and
metrics are the paper configs' own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from exoformer.data.checksums import verify_files
from exoformer.errors import UserError, did_you_mean
from exoformer.eval.task_facts import PAPER_TASKS, TASK_FACTS

SUITES = ("paper", "smoke")
SMOKE_PREFIX = "smoke_"
CHECKSUM_FILE = "SHA256SUMS"
REFETCH = "the file changed since it was fetched: re-run `python reproduce.py prefetch`"
SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")


def task_configs(suite: str, data_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """The lm-eval task configs of `suite`, in PAPER_TASKS order.

    `paper` without `data_dir` gives the built-in configs unchanged (they name Hugging Face hub datasets);
    with `data_dir`, every split is read from `<data_dir>/<task>/<split>.jsonl`, checked against
    `<data_dir>/SHA256SUMS` when that file exists. `smoke` reads the committed smoke files.
    """
    if suite == "paper":
        configs = [builtin_config(task) for task in PAPER_TASKS]
        if data_dir is None:
            return configs
        root = Path(data_dir).expanduser().resolve()
        if not root.is_dir():
            raise UserError("task data directory not found", where=str(root),
                            fix="run `python reproduce.py prefetch` on a machine with internet and point "
                                "EXOFORMER_TASK_DIR (or eval data_dir) at its tasks/ folder")
        located = [local_config(cfg, task=cfg["task"], files=_paper_files(root, cfg)) for cfg in configs]
        verify_checksums(root, [Path(p) for cfg in located for p in cfg["dataset_kwargs"]["data_files"].values()])
        _check_files(located)
        return located
    if suite == "smoke":
        if data_dir is not None:
            raise UserError("the smoke suite reads the task files shipped in the repository, not a data directory",
                            where="eval.data_dir", fix="leave data_dir unset for suite 'smoke'")
        return _smoke_configs()
    raise UserError(f"unknown evaluation suite {suite!r}", where="eval.suite", fix=did_you_mean(suite, SUITES))


def builtin_config(task: str) -> dict[str, Any]:
    """lm-eval's own config for one of the paper's tasks, `include:` merged and `!function` helpers imported."""
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml  # the loader TaskManager itself uses

    if task not in TASK_FACTS:
        raise UserError(f"unknown paper task {task!r}", where="TASK", fix=did_you_mean(task, TASK_FACTS))
    facts = TASK_FACTS[task]
    cfg = load_yaml(Path(lm_eval.tasks.__file__).parent / facts.config, resolve_func=True, recursive=True)
    read = (cfg.get("task"), tuple(m["metric"] for m in cfg.get("metric_list", [])), tuple(named_splits(cfg)),
            eval_split(cfg))
    if read != (task, facts.metrics, facts.splits, facts.scored_split):
        raise RuntimeError(f"lm-eval's {facts.config} differs from exoformer/eval/task_facts.py: task, metrics, "
                           f"splits, scored split {read}; this harness is pinned to lm-eval 0.4.13")
    return cfg


def named_splits(cfg: dict[str, Any]) -> list[str]:
    """Every split a config names (each must exist in the dataset, even with zero shots: pitfall 1)."""
    return sorted({cfg[key] for key in SPLIT_KEYS if cfg.get(key)})


def eval_split(cfg: dict[str, Any]) -> str:
    """The split lm-eval scores: test when the config has one, else validation."""
    return cfg.get("test_split") or cfg.get("validation_split")


def local_config(cfg: dict[str, Any], *, task: str, files: dict[str, Path]) -> dict[str, Any]:
    """`cfg` renamed to `task` and reading its splits from local JSONL files (absolute paths)."""
    located = dict(cfg)
    located.pop("tag", None)  # a tag of the built-in config (e.g. ai2_arc) means nothing for local copies
    located.update(task=task, dataset_path="json", dataset_name=None,
                   dataset_kwargs={"data_files": {split: str(Path(path).resolve()) for split, path in files.items()}})
    return located


def _paper_files(root: Path, cfg: dict[str, Any]) -> dict[str, Path]:
    files = {split: root / cfg["task"] / f"{split}.jsonl" for split in named_splits(cfg)}
    for path in files.values():
        if not path.is_file():
            raise UserError("task data file not found", where=str(path),
                            fix=f"run `python reproduce.py prefetch` to write {root}/<task>/<split>.jsonl for "
                                f"every split lm-eval's {cfg['task']} config names ({', '.join(files)})")
    return files


def verify_checksums(root: Path, files: list[Path]) -> None:
    """Check `files` against `<root>/SHA256SUMS` (sha256sum format) when it exists; every file must be listed."""
    sums_path = root / CHECKSUM_FILE
    if sums_path.is_file():
        verify_files(root, files, sums_path=sums_path, fix=REFETCH)


def check_jsonl(path: Path) -> int:
    """The number of rows of a task file, each a JSON object; else a UserError at file:line.

    lm-eval's own reader reports a truncated or garbled file as a DatasetGenerationError naming no file.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UserError(f"cannot read task data file ({error.strerror or error})", where=str(path),
                        fix=REFETCH) from None
    rows = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            what = "not UTF-8" if isinstance(error, UnicodeDecodeError) else f"not JSON ({error.msg})"
            raise UserError(f"task data line is {what}: a truncated or damaged file", where=f"{path}:{number}",
                            fix=REFETCH) from None
        if not isinstance(row, dict):
            raise UserError(f"task data line is a JSON {type(row).__name__}, not an object", where=f"{path}:{number}",
                            fix=REFETCH)
        rows += 1
    if rows == 0:
        raise UserError("task data file holds no rows", where=str(path), fix=REFETCH)
    return rows


def _check_files(configs: list[dict[str, Any]]) -> None:
    for cfg in configs:
        for path in cfg["dataset_kwargs"]["data_files"].values():
            check_jsonl(Path(path))


def _smoke_configs() -> list[dict[str, Any]]:
    from exoformer.data.smoke.tasks import smoke_task_files, verify_smoke_data

    verify_smoke_data()
    files = smoke_task_files()
    configs = []
    for task in PAPER_TASKS:
        cfg = builtin_config(task)
        name = SMOKE_PREFIX + task
        splits = files.get(name) or files.get(task)
        if not splits:
            raise UserError(f"no smoke data for task {name}", where="exoformer/eval/smoke_data",
                            fix="regenerate it with `python -m exoformer.data.smoke.tasks`")
        missing = [split for split in named_splits(cfg) if split not in splits]
        if missing:
            raise UserError(f"smoke task {name} lacks the split(s) {', '.join(missing)} that lm-eval's {task} "
                            "config names", where="exoformer/eval/smoke_data",
                            fix="regenerate it with `python -m exoformer.data.smoke.tasks`")
        configs.append(local_config(cfg, task=name, files={s: Path(splits[s]) for s in named_splits(cfg)}))
    _check_files(configs)
    return configs
