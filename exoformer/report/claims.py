"""The paper's mechanistic claims beside our measurements (issue 7, paper.md 4.4).

Claims and the paper's numbers (results/paper/reported.yaml, tables `claims` and `appendix-c`):
- attention sink: gated attention's layer-mean first-token attention is about 2x ExoFormer's ([A-v1]);
- over-smoothing: ExoFormer reaches about 95% token-to-token similarity ([RED]; we take the largest
  per-layer mean over the hidden states);
- appendix C: principal components for 99% variance with the anchor term removed, final layer, ExoFormer 321
  vs NuResFormer 181; with the own term removed, layer-averaged (over all L+1 hidden states, embeddings
  included, as official 6.2's per-layer list), 822 vs 611.
Which runs: each table row names the specs (e.g. ExoFormer = the `claims` table's `exoformer` row,
E-ExoFormer [inference]); a value is the mean over the seeds that have analysis results. Our numbers come from
each run's analysis/long.jsonl (written by the analyse stage); a run that has none reads "not run". A spec's run
directory is the one of its current hash, else its newest of the same preset (as `figure` chooses).
Torch-free.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from exoformer.errors import UserError
from exoformer.harness.runs import run_dir_for, runs_root
from exoformer.harness.registry import Registry
from exoformer.harness.reported import load_reported
from exoformer.report import NOT_REPORTED, NOT_RUN



@dataclass(kw_only=True, slots=True, frozen=True)
class Claim:
    """One line of the claims table."""

    claim: str
    paper: str
    ours: str
    runs: str
    """Which runs our number comes from (spec names and how many seeds)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Measured:
    """A per-run metric averaged over the seeds of one table row that have it."""

    value: float | None
    specs: tuple[str, ...]

    def describe(self, row_label: str) -> str:
        if self.value is None:
            return f"{row_label}: {NOT_RUN}"
        return f"{row_label}: {', '.join(self.specs)}"


def run_metrics(directory: Path) -> dict[str, float]:
    """metric -> value of a run's analysis/long.jsonl (rows {task, metric, value}); {} when absent."""
    path = directory / "analysis" / "long.jsonl"
    if not path.is_file():
        return {}
    out: dict[str, float] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise UserError("not a JSON line", where=f"{path}:{number}",
                            fix="re-run the analyse stage (reproduce.py run TARGET --force)") from None
        if isinstance(row, dict) and isinstance(row.get("value"), (int, float)):
            out[str(row.get("metric"))] = float(row["value"])
    return out


def run_directories(registry: Registry, names: list[str], *, preset: str | None,
                    runs_dir: str | None) -> dict[str, Path]:
    """spec name -> its run directory: the one of the current spec hash, else the newest of that spec and preset
    (as `figure` picks them), so that runs made with `--set` overrides are found too. Specs without a run are absent.
    """
    found: dict[str, Path] = {}
    for name in names:
        spec = registry.resolve(name, preset=preset)
        current = run_dir_for(spec, runs_root(runs_dir))
        if (current / "spec.yaml").is_file():
            found[name] = current
            continue
        siblings = [p.parent for p in current.parent.glob("*/spec.yaml")] if current.parent.is_dir() else []
        mine = [d for d in siblings if _preset_of(d) == spec.preset]
        if mine:
            found[name] = max(mine, key=lambda d: d.stat().st_mtime)
    return found


def _preset_of(directory: Path) -> str | None:
    try:
        data = yaml.safe_load((directory / "spec.yaml").read_text(encoding="utf-8"))
    except yaml.YAMLError:
        raise UserError("spec.yaml is not valid YAML", where=str(directory / "spec.yaml"),
                        fix="the run directory is damaged: re-run it with --force") from None
    return str(data.get("preset")) if isinstance(data, dict) else None


def measure(registry: Registry, table: str, row: str, metric: str, *, preset: str | None,
            runs_dir: str | None) -> Measured:
    """The mean of `metric` over the seeds of `table`/`row` that have it."""
    specs = list(next(r.specs for r in registry.tables[table].rows if r.id == row))
    directories = run_directories(registry, specs, preset=preset, runs_dir=runs_dir)
    found: list[tuple[str, float]] = []
    for name in specs:
        value = run_metrics(directories[name]).get(metric) if name in directories else None
        if value is not None:
            found.append((name, value))
    if not found:
        return Measured(value=None, specs=())
    return Measured(value=statistics.fmean(v for _, v in found), specs=tuple(n for n, _ in found))


def build_claims(registry: Registry, *, preset: str | None = None, runs_dir: str | None = None,
                 reported_path: str | None = None) -> list[Claim]:
    cells = load_reported(registry, reported_path)

    def paper(table: str, row: str, column: str) -> float | None:
        cell = cells.get((table, row, column))
        return None if cell is None else cell.value

    def get(table: str, row: str, metric: str) -> Measured:
        return measure(registry, table, row, metric, preset=preset, runs_dir=runs_dir)

    claims: list[Claim] = []

    gated = get("table1", "gated", "first_token_attention_layer_mean")
    exo = get("claims", "exoformer", "first_token_attention_layer_mean")
    ratio = None if gated.value is None or exo.value is None or exo.value == 0 else gated.value / exo.value
    claims.append(Claim(
        claim="attention sink: layer-mean first-token attention, gated attention / ExoFormer",
        paper=_num(paper("claims", "exoformer", "attention_sink_ratio_vs_gated"), "~{:g}x"),
        ours=NOT_RUN if ratio is None else f"{ratio:.2f}x ({gated.value:.4f} / {exo.value:.4f})",
        runs=f"{gated.describe('gated')}; {exo.describe('ExoFormer')}"))

    similarity = get("claims", "exoformer", "token_similarity_max")
    claims.append(Claim(
        claim="over-smoothing: max over layers of the mean token-to-token cosine, ExoFormer",
        paper=_num(paper("claims", "exoformer", "token_similarity_max"), "~{:.0%}"),
        ours=NOT_RUN if similarity.value is None else f"{similarity.value:.1%}",
        runs=similarity.describe("ExoFormer")))

    for column, text in (("pca_final_anchor_removed", "PCA components (99%), final layer, anchor term removed"),
                         ("pca_mean_self_removed", "PCA components (99%), layer mean, own term removed")):
        exo_pca = get("appendix-c", "exoformer", column)
        nu_pca = get("appendix-c", "nuresformer", column)
        claims.append(Claim(
            claim=f"{text}: ExoFormer vs NuResFormer",
            paper=f"{_num(paper('appendix-c', 'exoformer', column), '{:g}')} vs "
                  f"{_num(paper('appendix-c', 'nuresformer', column), '{:g}')}",
            ours=f"{_num(exo_pca.value, '{:.4g}', NOT_RUN)} vs {_num(nu_pca.value, '{:.4g}', NOT_RUN)}",
            runs=f"{exo_pca.describe('ExoFormer')}; {nu_pca.describe('NuResFormer')}"))
    return claims


def _num(value: float | None, fmt: str, missing: str = NOT_REPORTED) -> str:
    return missing if value is None else fmt.format(value)


def render_markdown(claims: list[Claim], *, preset: str | None) -> str:
    which = preset or "each spec's own"
    lines = [f"# Mechanistic claims (preset: {which})", "",
             "| claim | paper | ours | runs |", "|---|---|---|---|"]
    lines += [f"| {c.claim} | {c.paper} | {c.ours} | {c.runs} |" for c in claims]
    lines += ["", "PCA counts depend on d_model: compare them across models of one shape, not with the paper's "
              "numbers at another scale. Paper sources: results/paper/reported.yaml."]
    return "\n".join(lines) + "\n"
