"""Synthetic run directories for the report tests: the layout of docs/architecture.md "Runs", no training."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import yaml

from exoformer.registry.registry import Registry
from exoformer.registry.tables import TASKS
from exoformer.report.reading.selection import Selection
from exoformer.report.tables.build import BuiltTable, build_table
from exoformer.run_identity import RunIdentity, recipe_differences
from exoformer.rundir import RunDir, Status
from exoformer.runs.rundirs import identity_for

_REGISTRY: Registry | None = None


def registry() -> Registry:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry()
    return _REGISTRY


def make_run(root: Path, spec_name: str, *, preset: str = "450m", accuracies: dict[str, float] | None = None,
             acc_norm_offset: float = 0.0, stderr: float = 0.01, ppl: float | None = 15.0,
             state: str = "SUCCEEDED", curve: list[tuple[int, float]] | None = None, eval_rows: bool = True,
             task_prefix: str = "", overrides: tuple[str, ...] = (), checkpoint_as: tuple[str, str] | None = None,
             identity: bool = True) -> Path:
    """A run directory of `spec_name` under `preset` at its current hash, with results.

    accuracies: task -> acc (fraction); acc_norm = acc + acc_norm_offset (WinoGrande has acc only).
    overrides: made with `run --set ...` (the hash of that variant; the command is recorded in provenance).
    checkpoint_as: (table id, row id): a trained checkpoint evaluated as that row (spec file keys
    `source: checkpoint`, `table`, `as_row`).
    identity: write the run identity as a launch does (False: a run without one, which reads DAMAGED).
    """
    spec = registry().resolve(spec_name, preset=preset, overrides=overrides)
    run = run_dir_of(root, spec_name, spec.hash12)
    run.eval_dir.mkdir(parents=True, exist_ok=True)
    data = spec.to_dict()
    if checkpoint_as is not None:
        data.update({"source": "checkpoint", "table": checkpoint_as[0], "as_row": checkpoint_as[1]})
    run.spec_file.write_text(yaml.safe_dump(data, sort_keys=False))
    if identity:
        run.write_identity(_identity(spec, data, overrides, checkpoint_as))
    command = ["reproduce.py", "run", spec_name, "--preset", preset]
    for text in overrides:
        command += ["--set", text]
    run.write_provenance({"command": command})
    run.write_status(Status(state=state, stage="evaluate"))
    if eval_rows and accuracies is not None:
        rows = []
        for task in TASKS:
            if task not in accuracies:
                continue
            acc = accuracies[task]
            metrics = {"acc": acc} if task == "winogrande" else {"acc": acc, "acc_norm": acc + acc_norm_offset}
            for metric, value in metrics.items():
                rows.append({"spec": spec_name, "seed": spec.seed, "task": task_prefix + task, "metric": metric,
                             "value": value, "stderr": stderr, "n": 1000})
        run.eval_rows.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if ppl is not None:
        rows = [{"spec": spec_name, "seed": spec.seed, "task": "validation", "metric": "ppl", "value": ppl,
                 "stderr": None, "n": 4096}]
        run.validation.write_text(json.dumps({"val_ppl": ppl, "rows": rows}))
    if curve is not None:
        lines = [{"kind": "val", "step": i + 1, "tokens": tokens, "val_loss": loss} for i, (tokens, loss)
                 in enumerate(curve)]
        run.metrics_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run.path


def _identity(spec, data: dict, overrides: tuple[str, ...], checkpoint_as: tuple[str, str] | None) -> RunIdentity:
    recorded = identity_for(registry(), spec, overrides)
    if checkpoint_as is None:
        return recorded
    reference = registry().resolve(spec.name)
    under = registry().resolve(spec.name, preset=spec.preset)
    differs = recipe_differences(data, reference.to_dict(), under.to_dict(), checkpoint=True)
    return replace(recorded, source="checkpoint", table=checkpoint_as[0], as_row=checkpoint_as[1],
                   differs=tuple(differs))


def run_dir_of(root: str | Path, name: str, hash12: str) -> RunDir:
    return RunDir(Path(root) / name / hash12)


def selection(root: str | Path, *, reg: Registry | None = None, preset: str | None = None,
              overrides: tuple[str, ...] = ()) -> Selection:
    """The runs a reading verb reads under `root`, through the production path (the run index)."""
    return Selection.of_root(reg or registry(), root, preset=preset, overrides=overrides)


def read_table(root: str | Path, table_id: str, *, reg: Registry | None = None, preset: str | None = None,
               overrides: tuple[str, ...] = (), **kwargs) -> BuiltTable:
    """build_table over `selection(root, ...)`."""
    reg = reg or registry()
    return build_table(reg, table_id, selection=selection(root, reg=reg, preset=preset, overrides=overrides),
                       preset=preset, runs_root=root, **kwargs)


def uniform(acc: float) -> dict[str, float]:
    return {task: acc for task in TASKS}


# ------------------------------------------------------------------------------------------ a smoke Table 1

ROWS = ("base", "gated", "resformer", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer")
GATED = {"gated", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer"}
MIXING = {"resformer", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer"}


def probes(n_layer: int, i: int, gated: bool, mixing: bool) -> dict:
    blocks = [0.1 * (k + 1) + 0.03 * i for k in range(n_layer)]
    hidden = [0.2 + 0.15 * k + 0.02 * i for k in range(n_layer + 1)]
    na_gate, na_mix = "not applicable: the model has no attention gate", "not applicable: no mixing"
    base = {"first_token_attention": blocks, "attention_entropy": blocks, "token_similarity_mean": hidden,
            "token_similarity_std": hidden, "similarity_to_embeddings": hidden[::-1],
            "massive_activation": [10 ** (1 + 0.3 * k) for k in range(n_layer + 1)],
            "pca_components": [8 + 2 * k + i for k in range(n_layer + 1)], "pca_fraction": hidden,
            "layer_similarity": [[1.0 - 0.12 * abs(a - b) - 0.01 * i for b in range(n_layer + 1)]
                                 for a in range(n_layer + 1)],
            "gate_mean": blocks if gated else na_gate, "gate_sparsity": blocks[::-1] if gated else na_gate,
            "coefficients": {} if mixing else na_mix}
    ablations = {"none": base}
    for name, shift in (("anchor", 3), ("self", 6)):
        ablations[name] = {**base, "pca_components": [shift + 8 + k for k in range(n_layer + 1)]} if mixing else na_mix
    return {"input": {"batch": 2, "seq_len": 16, "doc_masking": False}, "n_layer": n_layer, "d_model": 16,
            "gated": gated, "mixing": mixing, "ablations": ablations}


def _coefficients(n_layer: int = 4, n_head: int = 2, d_model: int = 8) -> dict:
    """Ratios from 0.6 to 1.6 across channels and layers, so the map's centre (1.0) is inside the data."""
    per_path = {p: [{"anchor": [0.3 + 0.05 * c + 0.1 * layer for c in range(d_model)], "self": [0.5] * d_model}
                    for layer in range(n_layer)] for p in "qkvg"}
    return {"n_layer": n_layer, "n_head": n_head, "d_model": d_model, "paths": list("qkvg"), "mix_paths": list("qkvg"),
            "granularity": "elementwise", "dynamic": False, "anchor": "h0", "coefficients": per_path}


def smoke_runs(root: Path) -> Path:
    """Table 1 in the smoke preset: results, val curves and every analysis record, no training."""
    for i, row in enumerate(ROWS):
        curve = [(t, 3 + 4 / (1 + t * (1 + 0.1 * i) / 1000)) for t in range(0, 20001, 2000)]
        path = make_run(root, f"{row}-s42", preset="smoke", accuracies=uniform(0.30 + 0.02 * i), curve=curve,
                        ppl=40.0 - i, task_prefix="smoke_")
        run = RunDir(path)
        run.analysis_dir.mkdir(parents=True, exist_ok=True)
        run.probes.write_text(json.dumps(probes(4, i, row in GATED, row in MIXING)))
        series = {"score_pct": 0.01 * (i + 1), "spikes": i, "values": 2000, "scored": 1000, "dropped": 0}
        run.spikes.write_text(json.dumps({"window": 1000, "n_sigma": 7.0, "grad_norm": series, "loss": series}))
        if row in ("e-exoformer", "dynamic-e-exoformer"):
            run.coefficients.write_text(json.dumps(_coefficients()))
        run.provenance_file.write_text(json.dumps({"git": "abc", "host": "test"}))
        run.logs.mkdir(exist_ok=True)
        (run.logs / "local-1.log").write_text(f"training {row}\n")
    return root


N_DOCS = 200
"""Documents per task of `with_samples`."""


def with_samples(run: Path, acc: float, *, shift: int = 0) -> dict[str, dict[int, float]]:
    """eval/samples.json whose per-document scores average to `acc` on every task (acc_norm = acc), and N_DOCS as
    the rows' item count; returns the scores as replication.ItemScores."""
    ones = round(acc * N_DOCS)
    values = [1.0 if (i + shift) % N_DOCS < ones else 0.0 for i in range(N_DOCS)]
    tasks = {task: {"doc_id": list(range(N_DOCS)), "acc": values,
                    **({} if task == "winogrande" else {"acc_norm": values})} for task in TASKS}
    (run / "eval" / "samples.json").write_text(json.dumps({"format": 1, "tasks": tasks}))
    rows = [json.loads(line) for line in (run / "eval" / "long.jsonl").read_text().splitlines()]
    (run / "eval" / "long.jsonl").write_text("".join(json.dumps({**r, "n": N_DOCS}) + "\n" for r in rows))
    return {task: dict(enumerate(values)) for task in TASKS}
