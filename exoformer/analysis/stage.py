"""The `analyse` stage of a run: the paper's probes on the final checkpoint, and spike scores from the log.

Input (docs/official_code.md 6.1): the first `analysis.n_sequences` validation chunks of `analysis.seq_len`
tokens (default 4 x the model's seq_len = 4 x 2048 at paper scale; the smoke preset sets 256), unshuffled,
with no document masking (plain causal attention over each chunk, as the official analysis.py).
Unlike the official input, the shard header is never read as tokens (hazard H1), so chunk 0 starts with
real text. Probes run in fp32 (run_probes; official: bf16, hazard H4).

Writes `analysis/probes.json` (run_probes' output, restricted to the spec's probe selection, plus the
identity of the run, checkpoint and input), `analysis/spikes.json` (spike scores of `metrics.jsonl`) and
`analysis/long.jsonl` (the per-run numbers of the tables spike-scores, appendix-c and claims as rows
{task: "analysis", metric, value, stderr, n}, which exoformer.report.reading.selection reads), each atomically, and
returns a small summary for `stages/analyse.json` (docs/architecture.md "Runs").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.io import atomic_write_json
from exoformer.model.config import PATHS
from exoformer.rundir import RunDir
from exoformer.stage import StageContext

FORMAT = "exoformer.analysis.stage/1"

PROBE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "first_token_attention": ("first_token_attention",),
    "attention_entropy": ("attention_entropy",),
    "token_similarity": ("token_similarity_mean", "token_similarity_std"),
    "similarity_to_embeddings": ("similarity_to_embeddings",),
    "layer_similarity": ("layer_similarity",),
    "pca_components": ("pca_components", "pca_fraction"),
    "gate_stats": ("gate_mean", "gate_sparsity"),
    "coefficient_stats": ("coefficients",),
    "massive_activation": ("massive_activation",),
    "spike_scores": (),
}
"""Registry probe name (exoformer.registry.spec.PROBES) -> the per-ablation keys of run_probes that it selects.
`spike_scores` reads metrics.jsonl instead of the model; `coefficient_stats` also keeps the top-level
static_coefficients."""

ATTENTION_PROBES = frozenset({"first_token_attention", "attention_entropy"})
"""Probes that need the O(T^2) attention probabilities; without them the forward skips computing them."""


def analyse_stage(ctx: StageContext) -> dict:
    """Run the analysis of `ctx.run_dir` for `ctx.spec` on `ctx.device`; return the stage summary.

    A run without a verified final checkpoint is a one-line UserError (only when a model probe is selected:
    spike scores need only metrics.jsonl). Spike scores come first: cheap, and a missing log fails fast.
    """
    spec, run_dir = ctx.spec, Path(ctx.run_dir)
    config = spec.analysis
    if not config.enabled:
        ctx.say("analysis disabled (analysis.enabled: false); nothing to do")
        return {"skipped": "analysis.enabled is false"}
    selected = tuple(config.probes)
    files = ctx.files
    summary: dict[str, Any] = {"probes": list(selected)}
    rows: list[dict] = []

    if "spike_scores" in selected:
        from exoformer.analysis.metrics import spike_scores_from_metrics

        spikes = spike_scores_from_metrics(files)
        spikes = {"format": FORMAT, "spec": spec.name, **spikes}
        atomic_write_json(files.spikes, spikes)
        summary["spikes_json"] = files.display(files.spikes)
        summary["grad_spike_score_pct"] = spikes["grad_norm"]["score_pct"]
        summary["loss_spike_score_pct"] = spikes["loss"]["score_pct"]
        rows += [_row("grad_spike_score", spikes["grad_norm"]["score_pct"], spikes["grad_norm"]["values"]),
                 _row("loss_spike_score", spikes["loss"]["score_pct"], spikes["loss"]["values"])]
        ctx.say(f"spike scores: grad_norm {_pct(spikes['grad_norm'])}, loss {_pct(spikes['loss'])}"
                  " -> analysis/spikes.json")

    model_probes = [p for p in selected if PROBE_OUTPUTS[p]]
    if model_probes:
        started = time.perf_counter()
        probes = probe_run(run_dir, spec, model_probes, device=ctx.device)
        atomic_write_json(files.probes, probes)
        summary["probes_json"] = files.display(files.probes)
        summary["checkpoint"] = probes["run"]["checkpoint"]
        summary["input"] = probes["input"]
        summary["seconds"] = round(time.perf_counter() - started, 3)
        if "peak_device_bytes" in probes["run"]:
            summary["peak_device_bytes"] = probes["run"]["peak_device_bytes"]
        summary["coefficients_json"] = write_coefficients(run_dir, probes["run"]["checkpoint"], spec.name)
        summary.update(_headline(probes))
        rows += [_row(metric, value, probes["input"]["batch"] * probes["input"]["seq_len"])
                 for metric, value in _table_numbers(probes).items()]
        ctx.say(f"probes on {probes['input']['batch']} x {probes['input']['seq_len']} tokens of "
                  f"{probes['run']['checkpoint']} -> analysis/probes.json ({summary['seconds']:.1f} s)")

    if rows:
        files.write_rows(files.analysis_rows, rows)
        summary["long_jsonl"] = files.display(files.analysis_rows)
    return summary


def probe_run(run_dir: Path, spec: Any, probes: list[str] | tuple[str, ...], *, device: Any = None) -> dict:
    """Load the run's final checkpoint (verified), build the fixed input, run the probes; JSON-ready dict."""
    import torch

    from exoformer.analysis.probes import run_probes
    from exoformer.train.checkpoint import checkpoint_files, checkpoint_name, load_final_checkpoint, model_from_state

    checkpoints = RunDir(run_dir).checkpoints
    if not checkpoint_files(checkpoints):
        raise UserError("the run has no complete checkpoint to analyse", where=str(checkpoints),
                        fix=f"run its train stage first (reproduce.py run {spec.name})")
    checkpoint = checkpoints / checkpoint_name(spec.train.steps)
    state = load_final_checkpoint(run_dir, spec.train.steps)  # verified, or a UserError naming the file
    model, model_config = model_from_state(state, where=str(checkpoint))
    del state
    device = torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")
    model = model.float().to(device)
    seq_len = spec.analysis.seq_len or model_config.seq_len
    idx = fixed_input(spec.train.data, n_sequences=spec.analysis.n_sequences, seq_len=seq_len,
                      vocab_size=model_config.vocab_size)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    result = run_probes(model, idx.to(device), None, ablations=spec.analysis.ablations,
                        attention=bool(ATTENTION_PROBES & set(probes)))
    result = select_outputs(result, probes)
    result["run"] = {"format": FORMAT, "spec": spec.name, "hash12": spec.hash12, "variant": spec.variant,
                     "shape": spec.shape, "checkpoint": checkpoint.name, "device": str(device)}
    if cuda:
        result["run"]["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(device) - before)
    result["input"] |= {"source": "validation", "data": str(spec.train.data), "first_chunk": 0}
    return result


def fixed_input(data: str, *, n_sequences: int, seq_len: int, vocab_size: int):
    """The first `n_sequences` validation chunks of `seq_len` tokens, unshuffled: (n_sequences, seq_len) int64."""
    from exoformer.data import resolve_data
    from exoformer.data.loader import ChunkedShards
    from exoformer.data.shards import find_shards

    directory = resolve_data(data)
    shards = ChunkedShards(find_shards(directory, "val"), seq_len, vocab_size=vocab_size)
    if shards.num_chunks < n_sequences:
        raise UserError(f"the validation shards hold {shards.num_chunks} sequences of {seq_len} tokens, the analysis "
                        f"needs {n_sequences}", where=str(directory),
                        fix="lower analysis.n_sequences or analysis.seq_len")
    return shards.batch(range(n_sequences)).x


def select_outputs(result: dict, probes: list[str] | tuple[str, ...]) -> dict:
    """Keep, in every ablation, only the keys of the selected registry probes (PROBE_OUTPUTS).

    An ablation that is "not applicable: ..." (a model that mixes nothing) stays that string.
    """
    unknown = [p for p in probes if p not in PROBE_OUTPUTS]
    if unknown:
        raise UserError(f"unknown probe {unknown[0]!r}", where="analysis.probes",
                        fix=f"use names from {sorted(PROBE_OUTPUTS)}")
    keep = {key for p in probes for key in PROBE_OUTPUTS[p]}
    out = dict(result)
    out["ablations"] = {name: ({k: v for k, v in values.items() if k in keep} if isinstance(values, dict) else values)
                        for name, values in result["ablations"].items()}
    if "coefficient_stats" not in probes:
        out.pop("static_coefficients", None)
    out["probes"] = [p for p in probes if PROBE_OUTPUTS[p]]
    return out


def _headline(probes: dict) -> dict:
    """A few numbers for stages/analyse.json: layer-mean attention sink, max token similarity, final PCA count."""
    base = probes["ablations"].get("none", {})
    out: dict[str, Any] = {}
    sink = base.get("first_token_attention")
    if isinstance(sink, list) and sink and all(v is not None for v in sink):
        out["first_token_attention_layer_mean"] = sum(sink) / len(sink)
    similarity = base.get("token_similarity_mean")
    if isinstance(similarity, list) and any(v is not None for v in similarity):
        out["token_similarity_max"] = max(v for v in similarity if v is not None)
    components = base.get("pca_components")
    if isinstance(components, list) and components:
        out["pca_components_final"] = components[-1]
    return out


def _table_numbers(probes: dict) -> dict[str, float]:
    """Per-run columns of the declared tables (experiments/tables.yaml), where this run has them.

    pca_final_anchor_removed: components of the last hidden state with the anchor term removed; pca_mean_self_removed:
    the mean over all L+1 hidden states (index 0 = embeddings, as docs/official_code.md 6.2's per-layer list)
    with the own term
    removed (paper appendix C: 321 vs 181 and 822 vs 611); token_similarity_max: the largest layer's mean
    token-to-token similarity (paper: ~95%); first_token_attention_layer_mean: the attention sink averaged over
    layers (the claims verb divides gated attention's by ExoFormer's).
    """
    wanted = ("token_similarity_max", "first_token_attention_layer_mean")
    out = {k: v for k, v in _headline(probes).items() if k in wanted}
    for ablation, metric, reduce in (("anchor", "pca_final_anchor_removed", lambda c: c[-1]),
                                     ("self", "pca_mean_self_removed", lambda c: sum(c) / len(c))):
        values = probes["ablations"].get(ablation)
        components = values.get("pca_components") if isinstance(values, dict) else None
        if isinstance(components, list) and components and all(c is not None for c in components):
            out[metric] = reduce(components)
    return out


COEFFICIENTS_FORMAT = "exoformer.analysis.coefficients/1"


def mixing_coefficients(state: dict, model_config: dict) -> dict:
    """The static coef_anchor / coef_self of every mixed path and layer, flat (head-major), with the config
    facts the lambda heatmaps need; a layer that does not mix has null. JSON-ready."""
    from exoformer.analysis.probes import _COEF_NAME  # the naming rule of docs/architecture.md

    n_layer, paths = int(model_config["n_layer"]), [p for p in PATHS if p in model_config.get("mix_paths", ())]
    found: dict[str, list] = {path: [None] * n_layer for path in paths}
    pairs: dict[tuple[int, str], dict[str, list[float]]] = {}
    for name, tensor in state.items():
        match = _COEF_NAME.search(name)
        if match and match[2] in found and int(match[1]) < n_layer:
            pairs.setdefault((int(match[1]), match[2]), {})[match[3]] = tensor.detach().float().reshape(-1).tolist()
    for (layer, path), pair in pairs.items():
        if {"anchor", "self"} <= pair.keys():
            found[path][layer] = pair
    return {"format": COEFFICIENTS_FORMAT, "n_layer": n_layer, "n_head": int(model_config["n_head"]),
            "d_model": int(model_config["d_model"]), "granularity": model_config.get("granularity", "elementwise"),
            "dynamic": bool(model_config.get("dynamic", False)), "anchor": model_config.get("anchor"),
            "paths": list(PATHS), "mix_paths": paths, "coefficients": found}


def write_coefficients(run_dir: Path, checkpoint_name: str, spec_name: str) -> str:
    """Write RunDir.coefficients from the analysed checkpoint; return its path in the run (for the summary).

    Memory-mapped, so only the coefficient tensors are read from a checkpoint that probe_run already verified.
    """
    import torch

    run = RunDir(run_dir)
    state = torch.load(run.checkpoints / checkpoint_name, map_location="cpu", weights_only=True, mmap=True)
    record = {**mixing_coefficients(state["model"], state["model_config"]), "spec": spec_name,
              "checkpoint": checkpoint_name}
    atomic_write_json(run.coefficients, record)
    return run.display(run.coefficients)


def _row(metric: str, value: float | None, n: int) -> dict:
    return {"task": "analysis", "metric": metric, "value": value, "stderr": None, "n": n}


def _pct(series: dict) -> str:
    score = series["score_pct"]
    return "not enough steps" if score is None else f"{score:.4f}%"
