"""`figure`: PNG + PDF from synthetic run directories; data-efficiency ratios; lambda ratios; dispatch by kind."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest


from synthetic import make_run, registry, uniform

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.figure_kinds import KINDS, check_figure_kinds
from exoformer.registry.registry import REPO_ROOT, Registry
from exoformer.registry.tables import FIGURE_KINDS
from exoformer.report.stats import data_efficiency
from exoformer.report.figures import draw as figures
from exoformer.rundir import RunDir

ROWS = ("base", "gated", "resformer", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer")


def _curve(scale: float) -> list[tuple[int, float]]:
    """loss(t) = 3 + 4 / (1 + t * scale / 1000): a model with scale s reaches any loss s times sooner."""
    return [(t, 3 + 4 / (1 + t * scale / 1000)) for t in range(0, 20001, 1000)]


def test_efficiency_ratio_recovers_a_known_speed_up():
    def curve(scale):
        pts = _curve(scale)
        return data_efficiency.Curve.of([p[0] for p in pts], [p[1] for p in pts])

    assert data_efficiency.multiplier([curve(1.0)], [curve(1.0)]).estimate == pytest.approx(1.0)
    sped_up = data_efficiency.multiplier([curve(1.84)], [curve(1.0)]).estimate
    assert sped_up == pytest.approx(1.84, rel=0.03)  # linear interpolation between logged points


def test_curves_and_bars_written_as_png_and_pdf(tmp_path, capsys):
    runs = tmp_path / "runs"
    for i, row in enumerate(ROWS):
        make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3 + 0.02 * i), curve=_curve(1 + 0.1 * i))
    out = tmp_path / "figs"
    for name in ("val-loss-table1", "accuracy-bars-table1"):
        assert main(["figure", name, "--preset", "smoke", "--runs-dir", str(runs), "--out", str(out)]) == 0
        for suffix in ("png", "pdf"):
            path = out / f"{name}.smoke.{suffix}"  # --preset smoke: the variant's files, as `table --out` names
            assert path.is_file() and path.stat().st_size > 1000
    assert (out / "val-loss-table1.smoke.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "val-loss-table1.smoke.pdf").read_bytes()[:4] == b"%PDF"
    ratios = json.loads((out / "val-loss-table1.smoke.ratios.json").read_text())
    assert ratios["base"]["Dynamic E-ExoFormer"] == pytest.approx(1.6, rel=0.03)


@pytest.mark.parametrize(("args", "run_preset", "suffix"), [
    ([], None, ""),  # the specs' own preset: the default reading keeps plain names
    ([], "smoke", ".smoke"),  # no --preset, but the reading fell back to smoke runs: named by what it holds
    (["--preset", "smoke"], "smoke", ".smoke"),
    (["--preset", "smoke", "--set", "eval.limit=2"], "smoke", ".smoke+eval.limit-2"),
])
def test_figure_and_table_files_are_named_by_the_variant_they_hold(tmp_path, capsys, args, run_preset, suffix):
    runs = tmp_path / "runs"
    for i, row in enumerate(ROWS):
        make_run(runs, f"{row}-s42", **({"preset": run_preset} if run_preset else {}),
                 accuracies=uniform(0.3 + 0.02 * i), curve=_curve(1 + 0.1 * i),
                 overrides=("eval.limit=2",) if "--set" in args else ())
    out = tmp_path / "figs"
    for verb, name in (("figure", "val-loss-table1"), ("table", "table1")):
        assert main([verb, name, *args, "--runs-dir", str(runs), "--out", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(f"{stem}{suffix}.{ext}" for stem, ext in (
        ("val-loss-table1", "png"), ("val-loss-table1", "pdf"), ("val-loss-table1", "ratios.json"), ("table1", "md")))


def _lambda_run(root: Path, spec: str, *, mix_paths, granularity="elementwise", anchor="h0") -> Path:
    """A run whose analyse stage wrote its coefficients: coef_anchor = 0.5 (layer + 1), coef_self = 0.5."""
    n_layer, n_head, d_model = 3, 2, 8
    run_dir = make_run(root, spec, preset="smoke", accuracies=None, ppl=None, state="RUNNING")
    width = {"elementwise": d_model, "headwise": n_head, "scalar": 1}[granularity]
    first = 1 if anchor == "internal" else 0
    per_path = {path: [None if layer < first else {"anchor": [0.5 * (layer + 1)] * width, "self": [0.5] * width}
                       for layer in range(n_layer)] for path in mix_paths}
    record = {"n_layer": n_layer, "n_head": n_head, "d_model": d_model, "paths": list("qkvg"),
              "mix_paths": list(mix_paths),
              "granularity": granularity, "dynamic": False, "anchor": anchor, "coefficients": per_path}
    run = RunDir(run_dir)
    run.analysis_dir.mkdir(parents=True, exist_ok=True)
    run.coefficients.write_text(json.dumps(record))
    return run_dir


def test_lambda_ratios_shapes_nan_rows_and_unmixed_paths(tmp_path):
    run_dir = _lambda_run(tmp_path, "e-nuresformer-vg-s42", mix_paths=("v", "g"), anchor="internal")
    ratios = figures.lambda_ratios(json.loads(RunDir(run_dir).coefficients.read_text()))
    assert ratios["q"] is None and ratios["k"] is None
    v = ratios["v"]
    assert v.shape == (3, 8)
    assert all(math.isnan(x) for x in v[0])  # layer 0 does not mix (internal anchor)
    assert v[2, 0] == pytest.approx(3.0)


def test_lambda_ratios_reject_a_record_of_the_wrong_width(tmp_path):
    run = RunDir(_lambda_run(tmp_path, "e-exoformer-s42", mix_paths=("v",)))
    record = json.loads(run.coefficients.read_text())
    record["granularity"] = "headwise"  # 8 values per layer where headwise has 2
    with pytest.raises(UserError, match="expected 2 \\(headwise\\)"):
        figures.lambda_ratios(record, where=str(run.coefficients))


def test_lambda_heatmaps_written_for_each_run(tmp_path):
    runs = tmp_path / "runs"
    _lambda_run(runs, "e-exoformer-s42", mix_paths=("q", "k", "v", "g"))
    _lambda_run(runs, "h-exoformer-s42", mix_paths=("q", "k", "v", "g"), granularity="headwise")
    _lambda_run(runs, "s-exoformer-s42", mix_paths=("v", "g"), granularity="scalar")
    make_run(runs, "e-nuresformer-s42", preset="smoke", accuracies=None, ppl=None, state="RUNNING")  # not analysed
    written = figures.draw(registry(), "lambda-heatmaps", runs_root=runs, out_dir=tmp_path / "f", preset="smoke")
    names = sorted(p.name for p in written)
    assert names == sorted(f"lambda-heatmaps-{s}-s42.{x}" for s in ("e-exoformer", "h-exoformer", "s-exoformer")
                           for x in ("png", "pdf"))


def test_lambda_heatmaps_without_analysed_runs_are_a_one_line_error(tmp_path):
    make_run(tmp_path, "e-exoformer-s42", preset="smoke", accuracies=None, ppl=None, state="RUNNING")
    with pytest.raises(UserError, match="none of its runs has analysed coefficients") as err:
        figures.draw(registry(), "lambda-heatmaps", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")
    assert "\n" not in str(err.value)


def test_colour_limits_are_percentiles_of_finite_values():
    import numpy as np

    values = np.array([[np.nan, *range(100)], [np.nan, 1e9, *range(99)]], dtype=float)
    lo, hi = figures.colour_limits(values)
    assert lo == pytest.approx(np.percentile(values[np.isfinite(values)], 1))
    assert hi < 1e9


def test_figure_without_runs_and_unknown_figure_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="no runs for figure"):
        figures.draw(registry(), "val-loss-table1", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")
    with pytest.raises(UserError, match="did you mean"):
        figures.draw(registry(), "val-loss-tabel1", runs_root=tmp_path, out_dir=tmp_path / "f")


def test_figures_dispatch_on_their_kind(tmp_path, monkeypatch):
    calls = []

    def fake_per_layer(declaration, runs, out_dir):
        calls.append((declaration["id"], [r[0] for r in runs], out_dir))
        return []

    monkeypatch.setitem(figures.PLOTTERS, "per-layer", figures._analysis_plot(fake_per_layer))
    make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.3))
    figures.draw(registry(), "attention-sink", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")
    assert calls == [("attention-sink", ["base-s42"], tmp_path / "f")]
    monkeypatch.delitem(figures.PLOTTERS, "per-layer")
    with pytest.raises(UserError, match="figure kind per-layer not available"):
        figures.draw(registry(), "token-similarity", runs_root=tmp_path, out_dir=tmp_path / "f", preset="smoke")


def _registry_copy(tmp_path: Path, *replacements: tuple[str, str]) -> Registry:
    directory = tmp_path / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", directory)
    path = directory / "figures.yaml"
    text = path.read_text()
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new, 1)
    path.write_text(text)
    return Registry(directory)


def test_a_renamed_figure_still_draws(tmp_path):
    reg = _registry_copy(tmp_path, ("  val-loss-table1:\n", "  loss-over-tokens:\n"),
                         ("  spike-scores:\n", "  instability:\n"))
    runs = tmp_path / "runs"
    for i, row in enumerate(("base", "gated")):
        run = RunDir(make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3), curve=_curve(1 + i)))
        run.analysis_dir.mkdir()
        series = {"score_pct": 0.01, "spikes": 1, "values": 2000}
        run.spikes.write_text(json.dumps({"grad_norm": series, "loss": series}))
    written = figures.draw(reg, "loss-over-tokens", runs_root=runs, out_dir=tmp_path / "f", preset="smoke")
    assert {p.name for p in written} == {"loss-over-tokens.png", "loss-over-tokens.pdf",
                                         "loss-over-tokens.ratios.json"}
    written = figures.draw(reg, "instability", runs_root=runs, out_dir=tmp_path / "f", preset="smoke")
    assert [p.name for p in written] == ["instability.png", "instability.pdf", "instability.md"]
    assert "| Gated Attention | gated-s42 | 0.0100 (1 spikes) |" in written[2].read_text()


def test_validate_rejects_a_kind_that_cannot_draw_its_series(tmp_path, capsys):
    old = '    kind: table\n    specs: [table:spike-scores]'
    reg = _registry_copy(tmp_path, (old, old.replace("table\n", "bars\n", 1)))
    with pytest.raises(UserError) as err:
        check_figure_kinds(reg)
    assert "figure 'spike-scores': kind 'bars'" in str(err.value) and "'analysis.spike_scores'" in str(err.value)
    assert "use kind table" in str(err.value) and "figures.yaml:" in str(err.value)
    assert main(["validate", "--registry", str(tmp_path / "experiments")]) == 2
    assert "cannot draw series 'analysis.spike_scores'" in capsys.readouterr().err


def test_every_kind_has_a_plotter_and_every_declared_kind_is_honest():
    assert set(figures.PLOTTERS) == set(KINDS) == set(FIGURE_KINDS)
    check_figure_kinds(registry())
    assert registry().figures["spike-scores"].kind == "table"


def test_report_table_gives_the_table_and_its_curve_and_bar_figures(tmp_path):
    from exoformer.report.pages.summary import report_table, table_figures

    assert set(table_figures(registry(), "table1")) == {"val-loss-table1", "accuracy-bars-table1"}
    runs = tmp_path / "runs"
    make_run(runs, "base-s42", preset="smoke", accuracies=uniform(0.4), curve=_curve(1.0))
    text, written = report_table(registry(), "table1", runs_root=runs, preset="smoke", figures_dir=tmp_path / "f")
    assert "| Base Transformer |" in text and "not run" in text
    assert {p.name for p in written} >= {"val-loss-table1.png", "accuracy-bars-table1.pdf"}
