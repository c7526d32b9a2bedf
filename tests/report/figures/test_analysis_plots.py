"""Analysis figures from hand-written analysis/probes.json and spikes.json: data, annotations, errors, files."""

import json
from pathlib import Path

import pytest

from exoformer.errors import UserError
from exoformer.report.figures import analysis_plots as ap
from exoformer.rundir import RunDir

NO_GATE = "not applicable: the model has no attention gate"
NO_MIX = "not applicable: the model mixes no projections (anchor 'none')"


def probes_json(n_layer=3, *, batch=2, seq=8, gated=True, mixing=True, offset=0.0) -> dict:
    """Per-layer values that encode (layer, offset), so the plotted numbers can be checked exactly."""
    blocks = [offset + 0.1 * (i + 1) for i in range(n_layer)]
    hidden = [offset + 0.1 * i for i in range(n_layer + 1)]
    base = {"first_token_attention": blocks, "attention_entropy": blocks, "token_similarity_mean": hidden,
            "token_similarity_std": hidden, "similarity_to_embeddings": hidden, "massive_activation": hidden,
            "pca_components": [10 + i for i in range(n_layer + 1)], "pca_fraction": hidden,
            "layer_similarity": [[1.0 if i == j else 0.5 for j in range(n_layer + 1)] for i in range(n_layer + 1)],
            "gate_mean": blocks if gated else NO_GATE, "gate_sparsity": blocks if gated else NO_GATE,
            "coefficients": {} if mixing else NO_MIX}
    ablations = {"none": base}
    for name, shift in (("anchor", 100), ("self", 200)):
        ablations[name] = ({**base, "pca_components": [shift + i for i in range(n_layer + 1)]} if mixing else NO_MIX)
    return {"input": {"batch": batch, "seq_len": seq, "doc_masking": False}, "n_layer": n_layer, "d_model": 16,
            "gated": gated, "mixing": mixing, "ablations": ablations}


def spikes_json(score, spikes=1, values=2000) -> dict:
    series = {"score_pct": score, "spikes": spikes, "values": values, "scored": max(0, values - 1000), "dropped": 0}
    return {"window": 1000, "n_sigma": 7.0, "grad_norm": series, "loss": dict(series, score_pct=0.0, spikes=0)}


def make_run(root: Path, name: str, probes: dict | None = None, spikes: dict | None = None) -> Path:
    run = RunDir(root / name / "abc123456789")
    run.analysis_dir.mkdir(parents=True)
    if probes is not None:
        run.probes.write_text(json.dumps(probes))
    if spikes is not None:
        run.spikes.write_text(json.dumps(spikes))
    return run.path


def figure(fid: str, *series: str) -> dict:
    return {"id": fid, "title": f"title of {fid}", "kind": "per-layer", "specs": [], "series": list(series),
            "source": "test"}


def test_per_layer_lines_average_seeds_and_annotate_missing(tmp_path):
    runs = [("a-s42", "A", make_run(tmp_path, "a-s42", probes_json(offset=0.0))),
            ("a-s1", "A", make_run(tmp_path, "a-s1", probes_json(offset=1.0))),
            ("b-s42", "B", make_run(tmp_path, "b-s42", probes_json(gated=False, mixing=False))),
            ("c-s42", "C", make_run(tmp_path, "c-s42")),  # run directory without analysis output
            ("d-s42", "D", None)]
    panels = ap.per_layer_panels(figure("gate-sparsity", "analysis.gate_stats"), runs)
    assert [p.title for p in panels] == ["gate mean", "fraction of gates < 0.2"]
    (line,) = panels[1].lines
    assert line.label == "A" and line.seeds == 2 and line.x == [0, 1, 2]
    half = 12.7062047 * 0.5 ** 0.5 / 2 ** 0.5  # two seeds 1 apart: the 95% Student t interval of their mean
    assert line.mean == pytest.approx([0.6, 0.7, 0.8])
    assert line.low == pytest.approx([0.6 - half, 0.7 - half, 0.8 - half])
    assert line.high == pytest.approx([0.6 + half, 0.7 + half, 0.8 + half])
    assert f"B: {NO_GATE}" in panels[1].notes
    assert "C: not run" in panels[1].notes and "D: not run" in panels[1].notes


def test_pca_panels_show_the_appendix_c_ablations(tmp_path):
    runs = [("a", "A", make_run(tmp_path, "a", probes_json())),
            ("b", "B", make_run(tmp_path, "b", probes_json(mixing=False)))]
    panels = ap.per_layer_panels(figure("pca-components", "analysis.pca_components"), runs)
    assert [p.title.split(": ")[1] for p in panels] == ["as trained", "anchor term removed", "own term removed"]
    assert [line.mean for line in panels[0].lines] == [[10, 11, 12, 13], [10, 11, 12, 13]]
    assert panels[1].lines[0].mean == [100, 101, 102, 103] and panels[2].lines[0].mean == [200, 201, 202, 203]
    assert panels[1].notes == [f"B: {NO_MIX}"]
    assert panels[0].xlabel == "hidden state (0 = embeddings)"


def test_different_depths_share_a_relative_depth_axis(tmp_path):
    runs = [("deep", "deep", make_run(tmp_path, "deep", probes_json(n_layer=4))),
            ("shallow", "shallow", make_run(tmp_path, "shallow", probes_json(n_layer=2)))]
    sink, = ap.per_layer_panels(figure("attention-sink", "analysis.first_token_attention"), runs)
    assert sink.lines[0].x == [0.25, 0.5, 0.75, 1.0] and sink.lines[1].x == [0.5, 1.0]  # block l at (l+1)/L
    similarity, = ap.per_layer_panels(figure("token-similarity", "analysis.token_similarity"), runs)
    assert similarity.lines[1].x == [0.0, 0.5, 1.0]
    assert "relative depth" in similarity.xlabel


def test_different_probe_inputs_are_a_one_line_error(tmp_path):
    runs = [("a", "A", make_run(tmp_path, "a", probes_json(seq=8))),
            ("b", "B", make_run(tmp_path, "b", probes_json(seq=16)))]
    with pytest.raises(UserError, match="different inputs") as err:
        ap.plot_per_layer(figure("attention-sink", "analysis.first_token_attention"), runs, tmp_path / "out")
    assert "\n" not in str(err.value)


def test_no_analysed_run_and_wrong_series_are_errors(tmp_path):
    with pytest.raises(UserError, match="no run of figure 'attention-sink'"):
        ap.plot_per_layer(figure("attention-sink", "analysis.first_token_attention"),
                          [("a", "A", make_run(tmp_path, "a"))], tmp_path / "out")
    with pytest.raises(UserError, match="cannot be drawn"):
        ap.plot_per_layer(figure("x", "val_loss"), [], tmp_path / "out")
    with pytest.raises(UserError, match="cannot be drawn"):  # the lambda heatmaps are kind heatmap, not per-layer
        ap.KIND_PLOTS["per-layer"](figure("x", "analysis.coefficient_stats"), [], tmp_path / "out")


def test_every_analysis_figure_writes_png_and_pdf(tmp_path):
    runs = [("a", "A", make_run(tmp_path, "a", probes_json(), spikes_json(0.05))),
            ("b", "B", make_run(tmp_path, "b", probes_json(gated=False, mixing=False, n_layer=4), spikes_json(None)))]
    series = {"attention-sink": "analysis.first_token_attention", "token-similarity": "analysis.token_similarity",
              "pca-components": "analysis.pca_components", "gate-sparsity": "analysis.gate_stats",
              "similarity-to-embeddings": "analysis.similarity_to_embeddings",
              "massive-activations": "analysis.massive_activation", "layer-similarity": "analysis.layer_similarity"}
    for fid, name in series.items():
        kind = "matrix" if fid == "layer-similarity" else "per-layer"
        written = ap.KIND_PLOTS[kind](figure(fid, name), runs, tmp_path / "out")
        assert [p.name for p in written] == [f"{fid}.png", f"{fid}.pdf"]
        assert written[0].read_bytes().startswith(b"\x89PNG") and written[1].read_bytes().startswith(b"%PDF")


def test_spike_table_sits_beside_the_papers_values(tmp_path):
    reported = [ap.SpikeRow(label="ResFormer", specs=("resformer-s42", "resformer-s1"), paper=0.0458),
                ap.SpikeRow(label="Gated", specs=("gated-s42",), paper=0.0085),
                ap.SpikeRow(label="Base", specs=("base-s42",), paper=None)]
    runs = [("resformer-s42", "ResFormer", make_run(tmp_path, "resformer-s42", spikes=spikes_json(0.05, 1, 2000))),
            ("base-s42", "Base", make_run(tmp_path, "base-s42", spikes=spikes_json(None, 0, 300))),
            ("extra-s42", "Extra", make_run(tmp_path, "extra-s42", spikes=spikes_json(0.0, 0)))]
    rows = ap.spike_rows(runs, reported)
    assert [(r["spec"], r["ours grad (%)"], r["paper grad"]) for r in rows] == [
        ("resformer-s42", "0.0500 (1 spikes)", "0.0458"),
        ("gated-s42", "not run", "0.0085"),
        ("base-s42", "not enough steps", "not known"),
        ("extra-s42", "0.0000 (0 spikes)", "not known")]
    fig = {"id": "spike-scores", "title": "Spikes", "kind": "table", "specs": ["table:spike-scores"],
           "series": ["analysis.spike_scores", "grad_norm", "loss"]}
    written = ap.KIND_PLOTS[fig["kind"]](fig, runs, tmp_path / "out")
    assert [p.name for p in written] == ["spike-scores.png", "spike-scores.pdf", "spike-scores.md"]
    markdown = written[2].read_text()
    assert "| ResFormer | resformer-s42 | 0.0500 (1 spikes) | 0.0000 (0 spikes) | 0.0458 | 2000 |" in markdown
    assert "| Gated Attention | gated-s42 | not run | not run | 0.0085 | not run |" in markdown  # reported.yaml rows


def test_reported_spike_rows_come_from_reported_yaml():
    rows = {row.label: row.paper for row in ap.reported_spike_rows("spike-scores")}
    assert [rows[k] for k in ("ResFormer (unnormalised)", "Gating + ResFormer", "Gated Attention", "E-NuResFormer",
                              "E-ExoFormer")] == [0.0458, 0.0108, 0.0085, 0.0081, 0.0054]
    assert rows["Base Transformer"] is None


def test_plots_cover_every_declared_analysis_figure():
    from exoformer.registry.figure_kinds import KINDS, PER_LAYER_PROBES
    from exoformer.registry.registry import Registry
    from exoformer.report.figures import draw as figures

    declared = {fid: fig for fid, fig in Registry().figures.items()
                if fig.kind != "heatmap" and any(s.startswith("analysis.") for s in fig.series)}
    assert {fig.kind for fig in declared.values()} <= set(ap.KIND_PLOTS)
    assert set(ap.KIND_PLOTS) <= set(figures.PLOTTERS)
    assert set(PER_LAYER_PROBES) == set(ap.PER_LAYER)  # the harness's per-layer kind draws what this module can
    for fid, fig in declared.items():  # each declared series is one its kind's plot can draw
        assert all(KINDS[fig.kind].accepts(s) for s in fig.series), fid


def test_layer_similarity_colour_floor_is_shared_and_rounded():
    assert ap.similarity_colour_floor([[[1.0, 0.83]], [[0.91, None]]]) == pytest.approx(0.8)
    assert ap.similarity_colour_floor([[[1.0, -0.3]]]) == pytest.approx(-0.3)
    assert ap.similarity_colour_floor([[[1.0]]]) == pytest.approx(0.95)
    assert ap.similarity_colour_floor([]) == -1.0


def test_figure_verb_dispatches_to_these_plots(tmp_path):
    """The report engineer's `figure NAME` finds the runs and calls PLOTS with (declaration, runs, out_dir)."""
    from exoformer.registry.registry import Registry
    from exoformer.report.figures import draw as figures
    from exoformer.runs.rundirs import identity_for

    registry = Registry()
    for name, gated in (("base-s42", False), ("gated-s42", True)):
        spec = registry.resolve(name, preset="smoke")
        run = RunDir(tmp_path / "runs" / name / spec.hash12)
        run.analysis_dir.mkdir(parents=True)
        run.spec_file.write_text(f"name: {name}\nseed: 42\npreset: smoke\neval: {{suite: smoke}}\n")
        run.write_identity(identity_for(registry, spec))
        run.probes.write_text(json.dumps(probes_json(gated=gated, mixing=False)))
    written = figures.draw(registry, "gate-sparsity", runs_root=tmp_path / "runs", out_dir=tmp_path / "fig",
                           preset="smoke")
    assert [p.name for p in written] == ["gate-sparsity.png", "gate-sparsity.pdf"]
