"""A run that evaluates a given checkpoint instead of training one (`reproduce.py evaluate PATH --as ROW`).

The checkpoint (the author's released `ckpt_step:N.pt` or a `checkpoints/step_N.pt` of one of our runs) becomes
an ordinary run directory `<root>/<row's first spec name>/<hash12>/`:
- its Spec is the row's spec resolved under the preset, with the model replaced by what the importer read from
  the file and the spike-score probe dropped (there is no training log);
- its identity is sha256(checkpoint sha256 + eval settings): the evaluation (its scoring precision
  `eval.precision` included), the validation data settings and the analysis; the payload carries
  `source: checkpoint`, so it never equals a trained spec's hash;
- its train stage imports the file into checkpoints/ in our format (nothing is trained); validate, evaluate
  and analyse are the ordinary stages reading that model. The evaluate stage is the same scoring path as a
  trained run's (exoformer/eval/stage.py), at the scoring precision `eval.precision` (exoformer/eval/precision.py:
  `bf16` as the author's run_eval.py by default, or `fp32`). Validation runs at the row's train.precision (as its
  trained run validates), or in fp32 under fp32 scoring.
Planning reuses exoformer.runs.plan.assess and launching exoformer.runs.launch.launch, so dedup, resume
and the inline/local/slurm backends behave as for any run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.eval.precision import check_scoring_precision
from exoformer.budget.cost import Cost
from exoformer.runs.plan import PlannedRun, plan_specs, split_overrides
from exoformer.registry.profiles import Profile
from exoformer.registry.registry import Registry
from exoformer.registry.spec import Spec, _plain
from exoformer.stage import StageContext

SOURCE = "checkpoint"
VALIDATION_FIELDS = ("data", "seq_len", "micro_batch_seqs", "final_val_tokens", "doc_masking", "z_loss", "precision")
"""TrainConfig fields the validate stage reads: part of a checkpoint run's identity (the rest is inert)."""
VARIANT_FIELDS = ("gated", "anchor", "mix_paths", "anchor_norm_paths", "granularity", "dynamic")
"""Model fields that decide which table row a checkpoint can stand for."""

@dataclass(kw_only=True, slots=True, frozen=True)
class CheckpointSpec(Spec):
    """A Spec whose model comes from a file; `hash` covers the file's sha256 and the eval settings only."""

    checkpoint_path: str
    checkpoint_sha256: str
    checkpoint_size: int
    as_row: str
    table: str
    imported: dict = field(default_factory=dict, compare=False)
    """What the importer learned (exoformer.model.official_info.describe_checkpoint), minus the file identity."""

    def semantic(self) -> dict:
        return {"source": SOURCE, "checkpoint_sha256": self.checkpoint_sha256, "model": self.model.to_dict(),
                "eval": _plain(_asdict(self.eval)),
                "validation": {k: getattr(self.train, k) for k in VALIDATION_FIELDS},
                "analysis": _plain(_asdict(self.analysis))}

    def to_dict(self) -> dict:
        base = {"name": self.name, "group": self.group, "variant": self.variant, "shape": self.shape,
                "preset": self.preset, "seed": self.seed, "model": self.model.to_dict(), "train": self.train.to_dict(),
                "eval": _plain(_asdict(self.eval)), "analysis": _plain(_asdict(self.analysis)),
                "placement": _asdict(self.placement)}
        return {**base, "source": SOURCE, "as_row": self.as_row, "table": self.table,
                "checkpoint": {"path": self.checkpoint_path, "sha256": self.checkpoint_sha256,
                               "size": self.checkpoint_size, **self.imported},
                "hash": self.hash}

    def stage_functions(self) -> dict:
        """Stages that differ from the ordinary pipeline's (exoformer.runs.pipeline.stage_function)."""
        return {"train": import_stage}


def _asdict(obj: Any) -> dict:
    from dataclasses import asdict

    return asdict(obj)


# --------------------------------------------------------------------------------------------- resolving

def row_spec_name(registry: Registry, table: str, row: str) -> str:
    """The first spec of a table row (the paper's run): the run directory's first level."""
    if table not in registry.tables:
        raise UserError(f"unknown table {table!r}", where="--table", fix=did_you_mean(table, registry.tables))
    rows = {r.id: r for r in registry.tables[table].rows}
    if row not in rows:
        raise UserError(f"table {table} has no row {row!r}", where="--as", fix=did_you_mean(row, rows))
    return rows[row].specs[0]


def imported_model(path: str | Path, ckpt: dict):
    """(ExoTransformer, ModelConfig) of a checkpoint dict of either kind, every tensor accounted for."""
    from exoformer.model.official_info import OURS, checkpoint_kind, model_config_of

    where = str(path)
    if checkpoint_kind(ckpt) == OURS:
        from exoformer.model import ExoTransformer
        from exoformer.model.loading import check_tensor_shapes

        config = model_config_of(ckpt, where=where)
        check_tensor_shapes(ckpt["model"], config, where=where)  # on the meta device, before any allocation
        model = ExoTransformer(config)
        try:
            model.load_state_dict(ckpt["model"], strict=True)
        except RuntimeError as err:
            raise UserError(f"its tensors do not fit its model_config ({str(err).splitlines()[0][:160]})",
                            where=where, fix="the file is damaged: use another checkpoint of the run") from None
        return model.eval(), config
    from exoformer.model.loading import load_official_checkpoint

    try:
        model, config = load_official_checkpoint(ckpt)
    except UserError as err:
        raise UserError(err.problem, where=where, fix=err.fix) from None
    return model.eval(), config


def check_row_fits(config, row_model, *, variant: str, row: str, where: str) -> None:
    """The checkpoint must be the row's kind of model (gating, anchor, mixing, norms, granularity, dynamic).
    Raw internal anchors pass for a row with q/k anchor norms: an OQKRN run trained with model3 saves exactly
    model1's keys and the author evaluates it as raw model1 (hazard H7, docs/official_code.md)."""
    fields = [k for k in VARIANT_FIELDS
              if not (k == "anchor_norm_paths" and config.anchor == "internal" and not config.anchor_norm_paths)]
    differing = [f"{k} {getattr(config, k)!r} (row {row}: {getattr(row_model, k)!r})" for k in fields
                 if getattr(config, k) != getattr(row_model, k)]
    if differing:
        raise UserError(f"the checkpoint is not a {variant} model: " + "; ".join(differing[:3]), where=where,
                        fix="pass the --as row this checkpoint belongs to")


def resolve_checkpoint_spec(registry: Registry, path: str | Path, *, as_row: str, table: str = "table1",
                            preset: str | None = None, overrides: list[str] | tuple[str, ...] = (),
                            precision: str | None = None, ckpt: dict | None = None) -> CheckpointSpec:
    """The CheckpointSpec of one file for one table row; reads (and fully imports) the file once, so every
    refusal (not a checkpoint, a pickle with code, unknown layout, missing/unexpected keys, a shape or vocab we
    cannot express, the wrong row, NaN or inf weights) happens here, before any run directory exists.
    `precision` (the CLI's --precision) sets `eval.precision`; None keeps the spec's (`--set eval.precision=...`
    or the default)."""
    from exoformer.model.official_info import describe_checkpoint, read_checkpoint
    from exoformer.train.finite import check_finite_weights

    if precision is not None:
        check_scoring_precision(precision, where="--precision")
    name = row_spec_name(registry, table, as_row)
    spec_sets, _ = split_overrides(overrides)
    if precision is not None:
        spec_sets = [*spec_sets, f"eval.precision={precision}"]
    row_spec = registry.resolve(name, preset=preset, overrides=spec_sets)
    where = str(path)
    ckpt = read_checkpoint(path) if ckpt is None else ckpt
    model, config = imported_model(path, ckpt)
    check_finite_weights(model.state_dict(), where=where)
    check_row_fits(config, row_spec.model, variant=row_spec.variant, row=as_row, where=where)
    info = describe_checkpoint(path, ckpt)
    # The run's final step is the imported step, so the result stages load exactly that checkpoint (a file that
    # does not say its step becomes the run's only checkpoint, labelled step 1).
    # Validation as the row's trained run validates (its train.precision) under the default bf16 scoring, so the
    # same weights give the same val_ppl either way; fp32 scoring validates in fp32.
    validation_precision = "fp32" if row_spec.eval.precision == "fp32" else row_spec.train.precision
    train = replace(row_spec.train, precision=validation_precision, steps=int(info.get("step") or 1))
    if train.seq_len > config.seq_len:
        raise UserError(f"validation sequences of {train.seq_len} tokens exceed the checkpoint's context of "
                        f"{config.seq_len}", where=where, fix=f"add --set train.seq_len={config.seq_len}")
    _check_vocab(train.data, config.vocab_size, where=where)
    analysis = replace(row_spec.analysis, probes=tuple(p for p in row_spec.analysis.probes if p != "spike_scores"))
    if analysis.seq_len is not None and analysis.seq_len > config.seq_len:
        analysis = replace(analysis, seq_len=config.seq_len)
    imported = {k: v for k, v in info.items() if k not in ("file", "sha256", "size", "model_config")}
    return CheckpointSpec(name=row_spec.name, group=row_spec.group, variant=row_spec.variant, shape="checkpoint",
                          preset=row_spec.preset, seed=row_spec.seed, model=config, train=train, eval=row_spec.eval,
                          analysis=analysis, placement=row_spec.placement, source=where,
                          checkpoint_path=info["file"], checkpoint_sha256=info["sha256"],
                          checkpoint_size=info["size"], as_row=as_row, table=table, imported=imported)


def _check_vocab(data: str, vocab_size: int, *, where: str) -> None:
    """The run's tokenizer must fit the checkpoint's vocabulary (57,601 rows hold GPT-2's 50,257, hazard H1)."""
    from exoformer.data.tokenizer import for_data
    from exoformer.train.loop import resolve_data_dir

    try:
        data_dir = resolve_data_dir(data)
    except UserError:
        return  # no data here (a login node): the validate stage says so in its own words
    n_vocab = getattr(for_data(data_dir), "n_vocab", None)
    if isinstance(n_vocab, int) and n_vocab > vocab_size:
        raise UserError(f"the tokenizer of train.data={data!r} has {n_vocab} ids, the checkpoint's vocabulary "
                        f"{vocab_size}", where=where, fix="evaluate it under a preset whose data it was trained "
                                                         "on (450m: GPT-2 ids, FineWeb-Edu)")


# --------------------------------------------------------------------------------------------- planning

def eval_cost(spec: Spec, profile: Profile) -> Cost:
    """Forward FLOPs (2 N per token) of the evaluation, the validation and the analysis of one run; on a CPU profile
    the CPU time of those stages as exoformer/budget/cost.py cpu_stage_seconds prices them (calibrated)."""
    from exoformer.budget.cost import compute_params, cpu_stage_seconds, eval_requests

    requests, per_request = eval_requests(spec)
    tokens = requests * per_request
    tokens += spec.train.final_val_tokens + spec.analysis.n_sequences * (spec.analysis.seq_len or spec.model.seq_len)
    n = compute_params(spec)
    attention = 4.0 * spec.model.n_layer * spec.model.d_model * spec.model.seq_len / 2.0
    flops = (2.0 * n + attention) * tokens
    if profile.gpu is not None:
        return Cost(flops=flops, gpu_hours=flops / (profile.gpu.peak_bf16_tflops * 1e12 * profile.gpu.mfu) / 3600,
                    cpu_minutes=None)
    if profile.cpu is not None:
        return Cost(flops=flops, gpu_hours=None,
                    cpu_minutes=sum(cpu_stage_seconds(spec, profile, train=False).values()) / 60.0)
    return Cost(flops=flops, gpu_hours=None, cpu_minutes=None)


def plan_checkpoints(registry: Registry, specs: list[CheckpointSpec], *, runs_root: str | Path | None = None,
                     force: bool = False, retry_failed: bool = False, profile: str | None = None,
                     overrides: list[str] | tuple[str, ...] = (), write: bool = False) -> list[PlannedRun]:
    """PlannedRuns of checkpoint specs, decided as `plan` decides any spec (exoformer.runs.plan.assess)."""
    return plan_specs(registry, specs, runs_root=runs_root, overrides=overrides, force=force,
                      retry_failed=retry_failed, profile=profile, write=write, cost=eval_cost)


# --------------------------------------------------------------------------------------------- stages

def import_stage(ctx: StageContext) -> dict[str, Any]:
    """The train stage of a checkpoint run: import the file into checkpoints/ in our format; never trains."""
    from exoformer.io import sha256_file
    from exoformer.model.official_info import read_checkpoint
    from exoformer.train.checkpoint import save_checkpoint

    spec: CheckpointSpec = ctx.spec
    path = Path(spec.checkpoint_path)
    digest = sha256_file(path) if path.is_file() else None
    if digest != spec.checkpoint_sha256:
        raise UserError(f"the checkpoint is {'missing' if digest is None else 'another file'} now (sha256 "
                        f"{str(digest)[:12]}, planned {spec.checkpoint_sha256[:12]})", where=str(path),
                        fix="restore the file, or run `reproduce.py evaluate` on the new one")
    ckpt = read_checkpoint(path)
    model, config = imported_model(path, ckpt)
    if config != spec.model:
        raise UserError("the imported model differs from the planned one", where=str(path),
                        fix="run `reproduce.py evaluate` again on this file")
    step = spec.train.steps
    tokens = spec.imported.get("tokens")
    state = {"model": model.state_dict(), "model_config": spec.model.to_dict(), "train_config": spec.train.to_dict(),
             "step": step, "tokens": tokens if tokens is not None else 0,
             "imported_from": {"path": str(path), "sha256": digest}}
    saved = save_checkpoint(ctx.files.checkpoints, step, state, keep=1)
    record = ctx.files.read_provenance()
    record["checkpoint"] = {"path": str(path), "sha256": digest, "size": path.stat().st_size,
                            "eval_precision": spec.eval.precision, **spec.imported}
    ctx.files.write_provenance(record)
    ctx.say(f"import: {spec.imported.get('layout')} from {path} -> {ctx.files.display(saved)}")
    return {"imported": str(path), "sha256": digest, "step": step, "tokens": tokens,
            "layout": spec.imported.get("layout"), "checkpoint": ctx.files.display(saved)}
