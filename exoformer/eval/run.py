"""Evaluate a model on a suite with lm-eval, offline, and flatten the results into long-format rows.

Settings follow the author's `run_eval.py` (docs/official_code.md section 5): 5-shot, full splits, lm-eval's
task-default prompts and splits, and lm-eval's default seeds (`DEFAULT_SEEDS`: random 0, numpy 1234,
torch 1234, few-shot sampler 1234), which fix the few-shot demonstrations. The scoring precision is explicit
(exoformer/eval/precision.py; the author's bf16 by default). The differences are in the adapter (`ExoLM`:
batched) and in reading the datasets from local files.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exoformer.environ import env_directory, temporary_env
from exoformer.errors import UserError
from exoformer.eval.precision import DEFAULT_SCORING, check_scoring_precision
from exoformer.eval.samples import compact_samples

# lm-eval 0.4.13's simple_evaluate defaults, passed explicitly so results never depend on a future default.
DEFAULT_SEEDS = {"random_seed": 0, "numpy_random_seed": 1234, "torch_random_seed": 1234, "fewshot_random_seed": 1234}
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TASK_DIR_ENV = "EXOFORMER_TASK_DIR"
CACHE_ENV = "EXOFORMER_CACHE"
# Per-task keys of results["results"] that are not metrics.
NON_METRIC_KEYS = {"alias", "name", "sample_len"}


def default_cache_dir() -> Path:
    """Where datasets writes its Arrow cache of the task files: `$EXOFORMER_CACHE/hf` or results/cache/hf."""
    from exoformer.data import CACHE_FIX

    root = env_directory(CACHE_ENV, must_exist=False, fix=CACHE_FIX)
    return root / "hf" if root else Path(__file__).resolve().parents[2] / "results" / "cache" / "hf"


def evaluate(model: Any, tokenizer: Any, suite: str, *, data_dir: str | os.PathLike | None = None,
             num_fewshot: int = 5, batch_size: int = 32, limit: int | float | None = None,
             device: str = "cpu", cache_dir: str | os.PathLike | None = None, precision: str = DEFAULT_SCORING,
             keep_samples: bool = False) -> dict[str, Any] | None:
    """Run lm-eval's `simple_evaluate` on `suite` and return its results dict, JSON-safe and without samples.

    `model` is an ExoTransformer (wrapped in `ExoLM(model, tokenizer, batch_size, device)`) or an
    `lm_eval` LM instance (used as is). For the paper suite `data_dir` defaults to `$EXOFORMER_TASK_DIR`;
    hub datasets are never fetched (the offline flags are set while evaluating). `limit` is lm-eval's
    per-task document limit, for tests only. `precision` is the scoring precision (the caller casts the
    weights: exoformer.eval.scoring.scoring_model). `keep_samples` adds "per_sample", lm-eval's per-document
    metrics in the compact form of exoformer/eval/samples.py. Under a torch.distributed group the documents
    are split across the ranks (exoformer.eval.lm.ExoLM); rank 0 gets the results and every other rank None.
    """
    from exoformer.eval.suites import task_configs

    if suite == "paper" and data_dir is None:
        data_dir = env_directory(TASK_DIR_ENV, fix="point it at the tasks/ folder that `python reproduce.py "
                                                   "prefetch` wrote")
        if not data_dir:
            raise UserError("the paper suite needs the six task datasets on local disk", where="eval.data_dir",
                            fix="run `python reproduce.py prefetch` on a machine with internet, then set "
                                f"{TASK_DIR_ENV}=<prefetch dir>/tasks")
    if isinstance(num_fewshot, bool) or not isinstance(num_fewshot, int) or num_fewshot < 0:
        raise UserError(f"num_fewshot must be a non-negative integer, got {num_fewshot!r}", where="eval.num_fewshot",
                        fix="use 0 or more (the paper uses 5)")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    configs = task_configs(suite, data_dir)
    for cfg in configs:
        # datasets reads HF_HOME once, at import; passing cache_dir to load_dataset works whenever it was imported.
        cfg["dataset_kwargs"] = {**cfg.get("dataset_kwargs", {}), "cache_dir": str(cache / "datasets")}

    with _offline_env(cache):
        import lm_eval
        from lm_eval.api.model import LM
        from lm_eval.tasks import TaskManager

        from exoformer.eval.lm import ExoLM
        from exoformer.eval.templates import compiled_templates
        from exoformer.train.distributed import group_rank_and_size

        split = splits_across_ranks(limit)
        if not split and group_rank_and_size()[0] != 0:
            return None  # too few documents to give every rank a share: rank 0 scores them all
        lm = model if isinstance(model, LM) else ExoLM(model, tokenizer, batch_size=batch_size, device=device,
                                                      precision=check_scoring_precision(precision),
                                                      data_parallel=split)
        with dataset_cache_errors(cache / "datasets", data_dir), compiled_templates(), environment_in_provenance():
            results = lm_eval.simple_evaluate(
                model=lm, tasks=configs, num_fewshot=num_fewshot, batch_size=batch_size, device=device,
                limit=limit, log_samples=keep_samples, task_manager=TaskManager(include_defaults=False),
                **DEFAULT_SEEDS)
    if results is None:  # a rank other than 0 of a data-parallel evaluation: its share went to rank 0
        return None
    results = dict(results)
    samples = results.pop("samples", None)
    if keep_samples:
        results["per_sample"] = compact_samples(samples)
    results["scoring_precision"] = precision
    return json_safe(results)


@contextlib.contextmanager
def dataset_cache_errors(cache: Path, data_dir: str | os.PathLike | None) -> Iterator[None]:
    """An error of pyarrow or datasets while lm-eval reads the tasks (a damaged Arrow cache: every evaluation would
    fail the same way) becomes one line naming the cache folder and how it is rebuilt."""
    try:
        yield
    except Exception as err:
        if not _raised_by_arrow(err):
            raise
        first = (str(err).splitlines() or [""])[0][:160]
        again = (f"fetch the task files under {data_dir} again: reproduce.py prefetch" if data_dir else
                 "restore the smoke task files from git")
        raise UserError(f"the dataset cache cannot be read ({type(err).__name__}: {first})", where=str(cache),
                        fix=f"delete that folder (rm -rf {cache}) and run the same command again: the evaluation "
                            f"rebuilds it from the offline task files (if it fails again, {again})") from None


def _raised_by_arrow(err: Exception) -> bool:
    """An exception type of pyarrow or datasets, or one of the plain OSErrors that pyarrow raises for a truncated
    Arrow file ("Expected to be able to read 16464 bytes for message body": no errno, raised in pyarrow's code);
    an OSError of the system (a full disk while the cache is written) keeps its own message."""
    if (type(err).__module__ or "").startswith(("pyarrow", "datasets")):
        return True
    if not isinstance(err, OSError) or err.errno is not None:
        return False
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith(("pyarrow", "datasets"))


ENVIRONMENT_NOTE = "not collected per evaluation: the run's provenance.json records the environment"


@contextlib.contextmanager
def environment_in_provenance() -> Iterator[None]:
    """lm-eval's simple_evaluate ends by describing the environment with torch.utils.collect_env, which runs pip,
    lscpu, nvidia-smi and others as child processes, every evaluation, a cost that weighs most on small models.
    A run records its environment once, in provenance.json (exoformer/runs/rundirs.py
    submit_provenance: code identity, package versions, host), so while `evaluate` runs lm-eval's report is
    replaced by the lm-eval version and a pointer there; every other field of the results is lm-eval's."""
    import lm_eval.evaluator

    original = lm_eval.evaluator.add_env_info

    def pointer(storage: dict[str, Any]) -> None:
        from importlib.metadata import version

        storage.update(pretty_env_info=ENVIRONMENT_NOTE, lm_eval_version=version("lm_eval"))

    lm_eval.evaluator.add_env_info = pointer
    try:
        yield
    finally:
        lm_eval.evaluator.add_env_info = original


def _offline_env(cache: Path) -> contextlib.AbstractContextManager:
    """Offline flags and HF_HOME for the duration of an evaluation; the previous environment is restored."""
    return temporary_env({**OFFLINE_ENV, "HF_HOME": str(cache)})


def json_safe(obj: Any) -> Any:
    """A copy of `obj` that `json.dumps(..., allow_nan=False)` accepts: non-JSON leaves are dropped, NaN/inf -> None."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            safe = json_safe(value)
            if safe is not _DROP:
                out[str(key)] = safe
        return out
    if isinstance(obj, (list, tuple)):
        return [item for item in map(json_safe, obj) if item is not _DROP]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        try:
            return json_safe(obj.item())
        except (TypeError, ValueError):
            return _DROP
    return _DROP


_DROP = object()


def long_rows(results: dict[str, Any], *, spec: str, seed: int) -> list[dict[str, Any]]:
    """One row per (task, metric): spec, seed, task, metric, value, stderr (None when lm-eval has none), n.

    lm-eval keys are `<metric>,<filter>`; the filter is `none` for these tasks and is dropped from the name
    (another filter stays in it as `<metric>,<filter>`). `n` is the number of documents scored.
    """
    per_task = results.get("results")
    if not isinstance(per_task, dict) or not per_task:
        raise UserError("no evaluation results in this lm-eval output", where=f"{spec} (seed {seed})",
                        fix="re-run the evaluation stage")
    n_samples = results.get("n-samples", {})
    rows = []
    for task in sorted(per_task):
        metrics = per_task[task]
        n = n_samples.get(task, {}).get("effective")
        for key in sorted(metrics):
            if key in NON_METRIC_KEYS or "," not in key:
                continue
            metric, _, filt = key.partition(",")
            if metric.endswith("_stderr"):
                continue
            stderr = metrics.get(f"{metric}_stderr,{filt}")
            rows.append({"spec": spec, "seed": seed, "task": task,
                         "metric": metric if filt == "none" else key,
                         "value": _number(metrics[key]), "stderr": _number(stderr), "n": n})
    return rows


def _number(value: Any) -> float | None:
    """lm-eval writes 'N/A' for a missing stderr (bootstrap_iters=0); NaN has no JSON form."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def dumps(results: dict[str, Any]) -> str:
    """Strict JSON text of an `evaluate` result (for eval/results.json)."""
    return json.dumps(results, indent=2, allow_nan=False)


def splits_across_ranks(limit: int | float | None) -> bool:
    """Whether the documents are split across the ranks of a torch.distributed group: lm-eval deals each task's
    first `limit` documents round-robin, so a limit below the group size (or a fraction of the task) would leave a
    rank without documents, which lm-eval refuses; then rank 0 alone scores them. Without a group: False."""
    from exoformer.train.distributed import group_rank_and_size

    _, world = group_rank_and_size()
    return world > 1 and (limit is None or (isinstance(limit, int) and limit >= world))
