"""Before the first GPU-hour: does each job of a target fit its GPU, finish a checkpoint interval inside its time
limit, and split its batch over its ranks? `reproduce.py preflight` prints the answer; `run --backend slurm`
refuses, before anything is submitted, a job that would not (`refuse_unfit`).

Per spec on a profile:
- the model built on the meta device at its true shape (exoformer/budget/module_figures.py): its parameter count
  against the closed form, and, built at vocab 57,601, against docs/official_code.md section 2 where that table
  gives the author's count;
- FLOPs per token counted on the model's forward (module_figures) against the cost model's 6N + attention;
- memory per GPU (exoformer/budget/cost.py spec_memory, exoformer/budget/memory.py) against gpu.memory_gb
  (a CPU profile: slurm.mem_gb shared by its tasks);
- one checkpoint interval plus the requeue signal's delay against slurm.time_min, at the step time the cost
  model gives;
- the ranks and micro-batch dividing the global batch.
A job that fails a check gets one line naming the spec, the number and the fix (for memory: a micro-batch
and the gradient accumulation that keep the global batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from exoformer.budget import module_figures
from exoformer.budget.cost import GB, SpecMemory, estimate, flops_per_token, spec_memory
from exoformer.errors import UserError
from exoformer.registry.profiles import Profile
from exoformer.registry.spec import Spec

OFFICIAL_VOCAB = 57_601
OFFICIAL_COUNTS = {
    # (variant, n_layer, d_model): parameters counted by the author's code, docs/official_code.md section 2
    ("base", 29, 1024): 422_118_016, ("gated", 29, 1024): 452_526_720, ("gated-resformer", 29, 1024): 452_584_064,
    ("resformer", 29, 1024): 422_175_360, ("e-nuresformer", 29, 1024): 452_759_808,
    ("e-exoformer", 29, 1024): 456_958_848, ("h-exoformer", 29, 1024): 456_724_992,
    ("s-exoformer", 29, 1024): 456_721_512, ("dynamic-e-exoformer", 29, 1024): 457_437_928,
    ("base", 32, 1024): 453_581_824, ("resformer", 32, 1024): 453_645_312,
    ("base", 32, 1536): 932_030_976, ("gated", 32, 1536): 1_007_528_448, ("gated-resformer", 32, 1536): 1_007_623_680,
    ("resformer", 32, 1536): 932_126_208, ("e-nuresformer", 32, 1536): 1_007_915_520,
    ("e-exoformer", 32, 1536): 1_017_359_232, ("h-exoformer", 32, 1536): 1_016_970_112,
    ("s-exoformer", 32, 1536): 1_016_966_272, ("dynamic-e-exoformer", 32, 1536): 1_018_150_016,
}
MODEL2_VARIANTS = ("e-nuresformer",)
"""The author's model2 (NuResFormer) also allocates v_norm/g_norm gains, 2 x d_head, in every layer after the
first that it never uses (docs/official_code.md section 2); our model does not, so its count is lower by that."""


@dataclass(kw_only=True, slots=True)
class PreflightRow:
    """The checks of one spec on one profile; `problems` holds one refusal line per failed check."""

    spec: Spec
    profile: str
    params: int
    official: int | None
    official_ok: bool | None
    flops_module: float
    flops_cost: float
    ranks: int
    memory: SpecMemory | None
    step_seconds: float | None
    interval_seconds: float | None
    time_limit_seconds: float
    signal_delay_seconds: float
    problems: list[UserError] = field(default_factory=list)
    batch_problem: bool = False
    """The ranks and micro-batch do not divide the global batch (device_checks.check_placement refuses it too)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        m = self.memory
        return {
            "name": self.spec.name, "variant": self.spec.variant, "preset": self.spec.preset, "profile": self.profile,
            "params": self.params, "official_params": self.official, "official_params_ok": self.official_ok,
            "flops_per_token": self.flops_module, "flops_per_token_cost_model": self.flops_cost,
            "ranks": self.ranks, "micro_batch": m.micro_batch if m else self.spec.train.micro_batch_seqs,
            "accumulation": m.accumulation if m else None,
            "memory_gb": None if m is None else round(m.total / GB, 2),
            "memory_limit_gb": None if m is None or m.limit is None else round(m.limit / GB, 2),
            "memory_source": m.source if m else None, "memory_peak_phase": m.estimate.peak_phase if m else None,
            "memory_parts_gb": None if m is None else {
                k: round(getattr(m.estimate, k) / GB, 3)
                for k in ("weights", "gradients", "optimizer", "activations", "logits", "transient", "ddp_buckets",
                          "margin", "context")},
            "fits": None if m is None else m.fits,
            "step_seconds": self.step_seconds, "checkpoint_interval_seconds": self.interval_seconds,
            "time_limit_seconds": self.time_limit_seconds, "signal_delay_seconds": self.signal_delay_seconds,
            "ok": self.ok, "problems": [str(p) for p in self.problems],
        }


def check_profile_memory(profile: Profile) -> None:
    """A GPU profile must say how much memory its GPUs have (the loader refuses zero or negative values)."""
    if profile.gpu is not None and profile.gpu.memory_gb is None:
        raise UserError("has no gpu.memory_gb, so no job can be checked against its GPU",
                        where=f"{profile.source or profile.name}: gpu.memory_gb",
                        fix="add `memory_gb: 80` (GB per GPU, e.g. 80 for an H100 SXM) under gpu:")


def official_count(spec: Spec) -> int | None:
    """What our model should count at the author's vocabulary, from docs/official_code.md section 2 (None: the
    table has no entry for this variant and shape)."""
    m = spec.model
    count = OFFICIAL_COUNTS.get((spec.variant, m.n_layer, m.d_model))
    if count is None or m.n_head != 16 or m.mlp_ratio != 4:
        return None
    if spec.variant in MODEL2_VARIANTS:
        count -= 2 * m.d_head * (m.n_layer - 1)
    return count


def check_spec(spec: Spec, profile: Profile) -> PreflightRow:
    """Every check of the module docstring for one spec; failures become `problems`, never exceptions."""
    params = sum(p.numel for p in module_figures.parameters(spec.model))  # built on the meta device
    expected = official_count(spec)
    official_ok = ours = None
    if expected is not None:
        ours = sum(p.numel for p in module_figures.parameters(replace(spec.model, vocab_size=OFFICIAL_VOCAB)))
        official_ok = ours == expected
    ranks = profile.slurm.ranks
    sp = profile.slurm
    row = PreflightRow(spec=spec, profile=profile.name, params=params, official=expected, official_ok=official_ok,
                       flops_module=module_figures.flops_per_token(spec.model, spec.train.seq_len),
                       flops_cost=flops_per_token(spec.model, spec.train.seq_len), ranks=ranks, memory=None,
                       step_seconds=None, interval_seconds=None, time_limit_seconds=sp.time_min * 60.0,
                       signal_delay_seconds=float(sp.signal_delay_s))
    if params != spec.model.num_parameters():
        row.problems.append(UserError(f"the model built on the meta device has {params:,} parameters, the closed "
                                      f"form {spec.model.num_parameters():,}", where=spec.name,
                                      fix="report this: exoformer/model/config.py count_parameters is out of date"))
    if official_ok is False:
        row.problems.append(UserError(f"at vocab {OFFICIAL_VOCAB:,} the model has {ours:,} parameters, "
                                      f"docs/official_code.md section 2 says {expected:,}",
                                      where=spec.name, fix="check the variant's fields against the author's model"))
    try:
        row.memory = spec_memory(spec, profile)
    except UserError:
        row.problems.append(_batch_refusal(spec, profile, ranks))
        row.batch_problem = True
        return row
    if row.memory.fits is False:
        row.problems.append(_memory_refusal(spec, profile, row.memory))
    cost = estimate(spec, profile, memory=row.memory)
    if cost.gpu_hours is not None:
        row.step_seconds = cost.gpu_hours * 3600.0 / ranks / spec.train.steps
    elif cost.cpu_minutes is not None:
        row.step_seconds = cost.cpu_minutes * 60.0 / spec.train.steps
    if row.step_seconds is not None:
        row.interval_seconds = min(spec.train.checkpoint_every, spec.train.steps) * row.step_seconds
        if row.interval_seconds + row.signal_delay_seconds > row.time_limit_seconds:
            row.problems.append(_time_refusal(spec, profile, row))
    return row


def _memory_refusal(spec: Spec, profile: Profile, memory: SpecMemory) -> UserError:
    gpu = "GPU" if profile.gpu is not None else "rank"
    problem = (f"needs {memory.total / GB:.1f} GB per {gpu} at micro-batch {memory.micro_batch} "
               f"({memory.accumulation} accumulation step(s)), more than the {memory.limit / GB:.0f} GB of "
               f"{profile.source or profile.name}")
    smaller = _fitting_micro_batch(spec, profile)
    if smaller is None:
        fix = f"no micro-batch fits; use a profile with more memory per {gpu}"
    else:
        fix = (f"--set train.micro_batch_seqs={smaller.micro_batch}: {smaller.accumulation} accumulation steps keep "
               f"the global batch of {spec.train.batch_tokens:,} tokens ({smaller.total / GB:.1f} GB per {gpu})")
    return UserError(problem, where=spec.name, fix=fix)


def _fitting_micro_batch(spec: Spec, profile: Profile) -> SpecMemory | None:
    """The largest smaller micro-batch that divides the global batch over the ranks and fits, if any."""
    for m in range(spec.train.micro_batch_seqs - 1, 0, -1):
        try:
            memory = spec_memory(spec, profile, micro_batch=m)
        except UserError:
            continue
        if memory.fits:
            return memory
    return None


def _batch_refusal(spec: Spec, profile: Profile, ranks: int) -> UserError:
    t = spec.train
    per_step = t.seq_len * t.micro_batch_seqs * ranks
    problem = (f"batch_tokens={t.batch_tokens:,} is not a multiple of seq_len x train.micro_batch_seqs x ranks = "
               f"{t.seq_len} x {t.micro_batch_seqs} x {ranks} = {per_step:,}")
    working = t.dividing_micro_batches(ranks)
    fix = (f"--set train.micro_batch_seqs={working[0]}" if working
           else f"use a profile whose rank count divides {t.batch_tokens // t.seq_len} sequences")
    return UserError(problem, where=f"{spec.name} on {profile.source or profile.name}", fix=fix)


def _time_refusal(spec: Spec, profile: Profile, row: PreflightRow) -> UserError:
    every = min(spec.train.checkpoint_every, spec.train.steps)
    problem = (f"one checkpoint interval ({every} steps, about {row.interval_seconds / 60:.1f} min) plus the "
               f"{row.signal_delay_seconds:.0f} s requeue signal delay exceeds slurm.time_min="
               f"{row.time_limit_seconds / 60:.0f} of {profile.source or profile.name}")
    room = row.time_limit_seconds - row.signal_delay_seconds
    steps = math.floor(room / row.step_seconds) if room > 0 else 0
    fix = (f"--set train.checkpoint_every={steps}, or raise slurm.time_min" if steps >= 1
           else "raise slurm.time_min above slurm.signal_delay_s plus one step")
    return UserError(problem, where=spec.name, fix=fix)


def preflight(specs: list[Spec], profile: Profile) -> list[PreflightRow]:
    """The checks of every spec on one profile (a GPU profile without gpu.memory_gb is a UserError)."""
    check_profile_memory(profile)
    seen, rows = set(), []
    for spec in specs:
        if spec.hash not in seen:
            seen.add(spec.hash)
            rows.append(check_spec(spec, profile))
    return rows


def refuse_unfit(specs: list[Spec], profile: Profile) -> None:
    """Raise the first refusal (one line, with how many more) when a spec does not fit its GPU or time limit;
    called by the Slurm launch path before anything is written or submitted. A batch the ranks do not divide
    is left to device_checks.check_placement, which the launch runs next with the cluster's own checks."""
    problems = [p for row in preflight(specs, profile) if not row.batch_problem for p in row.problems]
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more: see `reproduce.py preflight`)" if len(problems) > 1 else ""
        raise UserError(first.problem + more, where=first.where, fix=first.fix)


def format_table(rows: list[PreflightRow]) -> str:
    """One line per spec: parameters, the official count check, FLOPs/token, micro-batch x accumulation,
    memory per GPU against the limit, the checkpoint interval against the time limit, and fits."""
    w = max([4, *(len(r.spec.name) for r in rows)])
    head = (f"{'SPEC':<{w}}  {'PARAMS':>8}  {'OFFICIAL':<9}  {'FLOP/TOK':>8}  {'VS COST':>7}  {'RANKS':>5}  "
            f"{'MICRO':>8}  {'MEM/GPU':>8}  {'LIMIT':>6}  {'CKPT':>8}  FITS")
    lines = [head]
    for r in rows:
        m = r.memory
        official = "-" if r.official_ok is None else ("matches" if r.official_ok else "DIFFERS")
        micro = "-" if m is None else f"{m.micro_batch}x{m.accumulation}"
        mem = "-" if m is None else f"{m.total / GB:.1f} GB"
        limit = "-" if m is None or m.limit is None else f"{m.limit / GB:.0f} GB"
        ckpt = "-" if r.interval_seconds is None else f"{r.interval_seconds / 60:.1f} min"
        fits = "yes" if r.ok else "NO"
        lines.append(f"{r.spec.name:<{w}}  {r.params / 1e6:>7.1f}M  {official:<9}  {r.flops_module:>8.3g}  "
                     f"{r.flops_module / r.flops_cost:>7.4f}  {r.ranks:>5}  {micro:>8}  {mem:>8}  {limit:>6}  "
                     f"{ckpt:>8}  {fits}")
    return "\n".join(lines)
