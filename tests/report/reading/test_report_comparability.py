"""Every cell knows its source and recipe: shrunk specs are "not comparable" everywhere, --set picks the
variant, checkpoint runs sit beside ours, csv is the table, bad runs roots and --out are one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest


from synthetic import make_run, read_table, registry, selection, uniform

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.report.figures import draw as figures
from exoformer.report.tables.claims import build_claims
from exoformer.report.tables.claims import render_markdown as render_claims
from exoformer.report.tables.diff import OUTSIDE, RANK_ONLY, WITHIN, diff_table, exit_code, render_diff
from exoformer.report.reading.recipe import differences
from exoformer.report.tables.build import MARK, render

SHRUNK = ("model.n_layer=2", "train.steps=30", "eval.limit=20", "train.final_val_tokens=16384")
"""A 450m spec shrunk to a few CPU minutes: numbers that mean nothing against the paper's."""


def _built(root, overrides=()):
    return read_table(root, "table1", overrides=tuple(overrides))


def _shrunk_rows(root):
    make_run(root, "base-s42", accuracies=uniform(0.30), ppl=150.0, overrides=SHRUNK)
    make_run(root, "gated-s42", accuracies=uniform(0.31), ppl=138.65, overrides=SHRUNK)


def test_differences_name_the_fields_most_telling_first():
    reference = registry().resolve("gated-s42")
    shrunk = registry().resolve("gated-s42", overrides=["train.steps=30", "eval.limit=20"]).to_dict()
    assert differences(shrunk, reference) == ["eval.limit=20", "train.steps=30 (paper 38147)"]
    assert differences(reference.to_dict(), reference) == []
    smoke = registry().resolve("gated-s42", preset="smoke").to_dict()
    assert differences(smoke, reference)[0] == "preset smoke (paper 450m)"
    # a checkpoint's weights are the paper's: only its evaluation recipe can differ
    assert differences(shrunk, reference, checkpoint=True) == ["eval.limit=20"]


def test_another_preset_is_named_first_then_only_the_set_on_top_of_it(tmp_path):
    from exoformer.report.reading.recipe import run_differences

    plain = make_run(tmp_path, "gated-s42", preset="smoke", ppl=40.0)
    assert run_differences(registry(), "gated-s42", plain) == ["preset smoke (paper 450m)"]
    steps = registry().resolve("gated-s42", preset="smoke").train.steps
    variant = make_run(tmp_path, "gated-s42", preset="smoke", ppl=40.0, overrides=("train.steps=31",))
    assert run_differences(registry(), "gated-s42", variant) == ["preset smoke (paper 450m)",
                                                                 f"train.steps=31 (smoke {steps})"]


def test_shrunk_spec_cells_are_marked_in_the_table_and_not_called_stale(tmp_path, capsys):
    _shrunk_rows(tmp_path)
    make_run(tmp_path, "resformer-s42", accuracies=uniform(0.49), ppl=14.4)
    built = _built(tmp_path)
    gated = built.cells[("gated", "val_ppl")]
    assert gated.value == pytest.approx(138.65) and not gated.comparable
    assert gated.why == ("eval.limit=20, train.final_val_tokens=16384 (paper 100000000), train.steps=30 "
                         "(paper 38147), model.n_layer=2 (paper 29), 1 of 3 seeds")
    assert built.cells[("resformer", "val_ppl")].comparable  # the paper's recipe and seed: comparable
    assert main(["table", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"138.65{MARK} / 14.64" in out and "| 14.40 / 14.32 |" in out
    assert f"{MARK} gated (ours): not comparable: eval.limit=20," in out
    assert "stale" not in out  # deliberate variants (the recorded command has --set), not stale runs


def test_shrunk_spec_cells_are_judged_on_rank_only_in_diff(tmp_path, capsys):
    _shrunk_rows(tmp_path)
    result = diff_table(_built(tmp_path))
    gated = next(c for c in result.cells if (c.row, c.column) == ("gated", "val_ppl"))
    assert gated.status == RANK_ONLY and "train.steps=30 (paper 38147)" in gated.why
    assert not result.outside and result.taus["val_ppl"] == (None, 2)  # two rows rank with no information
    assert main(["diff", "table1", "--runs-dir", str(tmp_path)]) == 1  # two rows: nothing carries information
    out = capsys.readouterr().out
    assert "val_ppl        no information over 2 row(s)" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("gated ") and "val_ppl" in ln)
    assert "OUTSIDE" not in line and line.endswith(f"rank only {MARK}")
    assert f"{MARK} gated: not comparable: eval.limit=20, train.final_val_tokens=16384" in out
    assert "NOT comparable with the paper's recipe" in out


def test_diff_with_nothing_compared_exits_1_and_says_why(tmp_path, capsys):
    assert main(["diff", "table1", "--runs-dir", str(tmp_path)]) == 1
    assert "nothing was compared: no run has results for this table (72 cells not run)" in capsys.readouterr().out
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.31), ppl=138.65, overrides=SHRUNK)  # one row: no rank
    result = diff_table(_built(tmp_path))
    assert not result.compared and exit_code(result) == 1
    assert "nothing was compared" in render_diff(result)


def test_shrunk_spec_claims_are_marked(tmp_path):
    for name, value in (("gated-s42", 0.5), ("e-exoformer-s42", 0.25)):
        run = Path(make_run(tmp_path, name, accuracies=None, ppl=None, state="RUNNING", overrides=SHRUNK))
        (run / "analysis").mkdir()
        from exoformer.rundir import RunDir

        RunDir(run).write_rows(RunDir(run).analysis_rows, [
            {"task": "analysis", "metric": "first_token_attention_layer_mean", "value": value, "stderr": None,
             "n": 4}, {"task": "analysis", "metric": "token_similarity_max", "value": 0.984, "stderr": None,
                       "n": 4}])
    claims = build_claims(registry(), selection=selection(tmp_path))
    smoothing = next(c for c in claims if c.claim.startswith("over-smoothing"))
    assert smoothing.ours == "98.4%" and "eval.limit=20" in smoothing.why and "1 of 3 seeds" in smoothing.why
    text = render_claims(claims, preset=None)
    assert f"| 98.4%{MARK} |" in text
    note = next(line for line in text.splitlines() if line.startswith(MARK) and smoothing.claim in line)
    shared = [c.claim for c in claims if c.why == smoothing.why]  # the claims it applies to, named in one line
    assert note == (f"{MARK} {shared[0] if len(shared) == 1 else 'claims ' + '; '.join(shared)}: not comparable: "
                    f"{smoothing.why}") and text.count(smoothing.why) == 1


def test_shrunk_spec_figure_carries_a_footnote(tmp_path, monkeypatch):
    curve = [(1000, 5.0), (2000, 4.0)]
    for name in ("base-s42", "gated-s42"):
        make_run(tmp_path, name, accuracies=uniform(0.3), ppl=150.0, curve=curve, overrides=SHRUNK)
    texts: list[str] = []
    from matplotlib.figure import Figure

    original = Figure.savefig

    def recording(self, *args, **kwargs):
        texts.extend(t.get_text() for t in self.texts)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    written = figures.draw(registry(), "val-loss-table1", runs_root=tmp_path, out_dir=tmp_path / "f")
    assert any(p.suffix == ".png" for p in written)
    notes = [t for t in texts if t.startswith("not comparable with the paper")]
    assert notes and "Base Transformer: eval.limit=20" in notes[0] and "Gated Attention: eval.limit=20" in notes[0]
    assert "model.n_layer=2 (paper 32)" in notes[0].replace("\n", " ")
    texts.clear()
    make_run(tmp_path / "real", "base-s42", accuracies=uniform(0.3), ppl=14.8, curve=curve)
    figures.draw(registry(), "val-loss-table1", runs_root=tmp_path / "real", out_dir=tmp_path / "g")
    assert not any(t.startswith("not comparable") for t in texts)


def test_reading_verbs_pick_the_variant_given_by_set(tmp_path, capsys):
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.49), ppl=14.7)
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.31), ppl=138.65, overrides=SHRUNK)
    assert _built(tmp_path).cells[("gated", "val_ppl")].value == pytest.approx(14.7)  # the current spec's run
    variant = _built(tmp_path, overrides=SHRUNK).cells[("gated", "val_ppl")]
    assert variant.value == pytest.approx(138.65) and not variant.comparable
    sets = [w for s in SHRUNK for w in ("--set", s)]
    assert main(["table", "table1", "--runs-dir", str(tmp_path), *sets]) == 0
    assert f"138.65{MARK} / 14.64" in capsys.readouterr().out
    assert _built(tmp_path, overrides=["train.steps=31"]).cells[("gated", "val_ppl")].value is None  # no such run


def test_csv_is_the_markdown_table_and_long_is_the_cell_frame(tmp_path):
    import io

    import pandas as pd

    make_run(tmp_path, "gated-s42", accuracies=uniform(0.5), ppl=14.0)
    _shrunk_rows(tmp_path / "shrunk")
    built = _built(tmp_path)
    wide = pd.read_csv(io.StringIO(render(built, "csv")))
    assert len(wide) == len(built.table.rows) == 9
    assert list(wide.columns[:4]) == ["row", "model", "val_ppl", "val_ppl paper"]
    gated = wide[wide["row"] == "gated"].iloc[0]
    assert gated["val_ppl"] == 14.0 and gated["val_ppl paper"] == 14.64 and gated["source"] == "ours"
    assert pd.isna(wide[wide["row"] == "base"].iloc[0]["val_ppl"])
    long = pd.read_csv(io.StringIO(render(built, "long")))
    assert len(long) == 9 * 8 and set(long["source"]) == {"ours"}
    shrunk = pd.read_csv(io.StringIO(render(_built(tmp_path / "shrunk"), "csv")))
    assert "eval.limit=20" in shrunk[shrunk["row"] == "gated"].iloc[0]["not comparable"]


def test_checkpoint_runs_sit_beside_ours_and_are_diffed_per_source_pair(tmp_path, capsys):
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.49), ppl=14.7)
    make_run(tmp_path, "base-s42", accuracies=uniform(0.48), ppl=14.80, checkpoint_as=("table1", "base"))
    read = selection(tmp_path)
    assert read.pick("gated-s42").run.source == "ours" and read.pick("base-s42") is None
    assert set(read.pick("base-s42", source="checkpoint").rows["source"]) == {"checkpoint"}
    built = _built(tmp_path)
    assert built.cells[("base", "val_ppl")].value is None  # the checkpoint is not one of our runs
    ckpt = built.cell(built.table.rows[0], "val_ppl", "checkpoint")
    assert ckpt.value == pytest.approx(14.80) and ckpt.comparable and ckpt.source == "checkpoint"
    assert main(["table", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ours / ckpt / paper" in out and "| not run / 14.80 / 14.79 |" in out
    assert "| 14.70 / not run / 14.64 |" in out
    result = diff_table(built)
    by = {(s.left, s.right): s for s in result.sections}
    base_ppl = next(c for c in by[("checkpoint", "paper")].cells if (c.row, c.column) == ("base", "val_ppl"))
    assert base_ppl.status == WITHIN and base_ppl.tolerance == pytest.approx(0.015 * 14.79)
    text = render_diff(result)
    assert "## checkpoint vs paper" in text and "## ours vs paper" in text
    assert "## ours vs checkpoint" not in text  # no row has both: no such section


def test_without_a_checkpoint_the_markdown_keeps_its_layout(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.40), acc_norm_offset=0.02, ppl=15.25)
    text = render(_built(tmp_path), "md")
    assert "ckpt" not in text and MARK not in text
    assert ("| Base Transformer | 15.25 / 14.79 | 42.00 / not known | 42.00 / not known | 42.00 / not known | "
            "42.00 / not known | 42.00 / not known | 40.00 / not known | 41.67 / 48.14 |") in text


def test_checkpoint_naming_an_unknown_row_is_a_one_line_error(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.48), ppl=14.8, checkpoint_as=("table1", "bsae"))
    with pytest.raises(UserError, match="row 'bsae'") as err:
        _built(tmp_path)
    assert "did you mean 'base'" in err.value.fix


def test_metric_convention_is_decided_from_avg6(tmp_path, capsys):
    # acc reproduces the paper's avg6 exactly; acc_norm is 5 points higher on five tasks (avg6 +4.17)
    make_run(tmp_path, "base-s42", accuracies=uniform(0.4814), acc_norm_offset=0.05, ppl=14.79)
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.4880), acc_norm_offset=0.05, ppl=14.64)
    result = diff_table(_built(tmp_path))
    fits = {f.convention: f for f in result.conventions if f.source == "ours"}
    assert fits["acc (6 tasks)"].gap == pytest.approx(0.0, abs=1e-9) and fits["acc (6 tasks)"].rows == 2
    assert fits["acc_norm (5 tasks) + acc (winogrande)"].gap == pytest.approx(5 * 5 / 6)
    line = next(ln for ln in render_diff(result).splitlines() if "acc (6 tasks)" in ln)
    assert "reproduces the paper best" in line
    assert any(c.status == OUTSIDE for c in result.cells if c.column == "avg6")


@pytest.mark.parametrize("verb", [["table", "table1"], ["diff", "table1"], ["claims"],
                                  ["figure", "val-loss-table1"], ["list"]])
def test_a_runs_root_that_does_not_exist_is_exit_2(tmp_path, capsys, verb):
    assert main([*verb, "--runs-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not exist" in err and str(tmp_path / "nope") in err and "--runs-dir" in err


@pytest.mark.parametrize("verb", [["table", "table1"], ["figure", "val-loss-table1"]])
def test_out_that_is_a_file_is_exit_2(tmp_path, capsys, verb):
    (tmp_path / "file").write_text("")
    assert main([*verb, "--runs-dir", str(tmp_path), "--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is a file, not a directory" in err and "--out" in err


def test_unknown_target_is_named_before_the_runs_root(tmp_path, capsys):
    assert main(["diff", "tabel1", "--runs-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown table 'tabel1'" in err and "did you mean 'table1'" in err


def test_bars_show_the_checkpoint_source_and_the_footnote(tmp_path, monkeypatch):
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.31), ppl=138.65, overrides=SHRUNK)
    make_run(tmp_path, "base-s42", accuracies=uniform(0.48), ppl=14.8, checkpoint_as=("table1", "base"))
    seen: list[tuple[str, list[str], list[float]]] = []
    from matplotlib.figure import Figure

    original = Figure.savefig

    def recording(self, *args, **kwargs):
        ax = self.axes[0]
        ys = [float(y) for c in ax.collections if hasattr(c, "get_offsets") for _, y in c.get_offsets()]
        seen.append((ax.get_title(), [t.get_text() for t in self.texts], ys))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    figures.draw(registry(), "accuracy-bars-table1", runs_root=tmp_path, out_dir=tmp_path / "f")
    title, texts, marker_ys = seen[0]
    assert "crosses: checkpoint evaluated as the row" in title
    assert any(t.startswith("not comparable with the paper: all runs: eval.limit=20") for t in texts)
    assert 48.0 in [round(y, 6) for y in marker_ys]  # the checkpoint's crosses (base has no bar of ours)


def test_ours_against_the_checkpoint_when_both_ran_a_row(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.48), ppl=16.0)
    # another directory (a spec file of its own); it is filed under the row's first spec all the same
    make_run(tmp_path, "base-s1337", accuracies=uniform(0.48), ppl=14.8, checkpoint_as=("table1", "base"))
    result = diff_table(_built(tmp_path))
    pair = next(s for s in result.sections if (s.left, s.right) == ("ours", "checkpoint"))
    ppl = next(c for c in pair.cells if (c.row, c.column) == ("base", "val_ppl"))
    assert ppl.reported == pytest.approx(14.8) and ppl.delta == pytest.approx(1.2)
    one_seed_each = 1.959964 * 2 ** 0.5  # the checkpoint is one seed as the paper's: diff's prior, one seed each
    assert ppl.status == OUTSIDE and ppl.tolerance == pytest.approx(one_seed_each * 0.005 * 14.8, rel=1e-6)
    arc = next(c for c in pair.cells if (c.row, c.column) == ("base", "arc_easy"))
    assert arc.status == WITHIN and arc.tolerance == pytest.approx(one_seed_each * 100 * (0.25 / 2376) ** 0.5, rel=1e-6)
    assert "## ours vs checkpoint" in render_diff(result) and exit_code(result) == 1
