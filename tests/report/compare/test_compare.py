"""`compare A B [C...]`: runs and variants side by side. Each value is the run's recorded one, each difference is to
the first operand, the header names exactly the config keys that differ, the overlay draws one line per run in a
style of its own, and an operand that names no finished run is one error line saying what to run."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest


from synthetic import make_run, registry, uniform

from exoformer.cli import main
from exoformer.registry.registry import Registry
from exoformer.registry.tables import DEFAULT_CONVENTION, TASKS
from exoformer.report.compare import curves as compare_figure
from exoformer.report.compare.operands import parse_operand, read_operands
from exoformer.rundir import RunDir

ERROR_LINE = re.compile(r"^error: (?:(?!: ).)+: .+ \(fix: .+\)$")
ACCURACIES = dict(zip(TASKS, (0.31, 0.52, 0.43, 0.27, 0.66, 0.55)))
VALIDATION = {"ppl": 21.5, "loss": 3.068, "ppl_ce": 20.25, "loss_ce": 3.008}


def _validation(run: Path, values: dict[str, float]) -> None:
    """A validation record with every metric of the validate stage (exoformer/eval/stage.py validation_rows)."""
    rows = [{"spec": run.parent.name, "seed": 42, "task": "validation", "metric": metric, "value": value,
             "stderr": None, "n": 4096} for metric, value in values.items()]
    RunDir(run).validation.write_text(json.dumps({"val_ppl": values["ppl"], "rows": rows}))


@pytest.fixture()
def runs(tmp_path):
    """The plain smoke run of base-s42, a --set variant of it, and gated-s42: each with its own numbers."""
    root = tmp_path / "runs"
    plain = make_run(root, "base-s42", preset="smoke", accuracies=ACCURACIES, acc_norm_offset=0.02,
                     curve=[(1000, 5.0), (2000, 4.0), (3000, 3.5)])
    _validation(plain, VALIDATION)
    variant = make_run(root, "base-s42", preset="smoke", accuracies={t: a + 0.1 for t, a in ACCURACIES.items()},
                       acc_norm_offset=0.02, ppl=18.0, overrides=("train.steps=30", "eval.limit=8"),
                       curve=[(1000, 5.1), (2000, 3.8)])
    gated = make_run(root, "gated-s42", preset="smoke", accuracies=uniform(0.5), ppl=17.0,
                     curve=[(1000, 4.8), (2000, 3.6), (3000, 3.2)])
    return root, plain, variant, gated


def _csv(capsys) -> dict[str, list[str]]:
    out = capsys.readouterr().out
    table = list(csv.reader(io.StringIO(out)))
    return {row[0]: row[1:] for row in table}


def test_side_by_side_values_are_the_recorded_ones_and_differences_are_to_the_first(runs, capsys):
    root, plain, variant, gated = runs
    assert main(["compare", "base-s42", "base-s42+train.steps=30,eval.limit=8", "gated-s42", "--preset", "smoke",
                 "--runs-dir", str(root), "--format", "csv"]) == 0
    got = _csv(capsys)
    assert got["metric"] == ["A base-s42@smoke", "B base-s42@smoke+train.steps=30,eval.limit=8", "C gated-s42@smoke",
                             "B - A", "C - A"]
    for task, acc in ACCURACIES.items():
        recorded = acc + (0.02 if DEFAULT_CONVENTION[task] == "acc_norm" else 0.0)  # the task's metric convention
        row = got[f"{task} {DEFAULT_CONVENTION[task]} (%)"]
        assert float(row[0]) == pytest.approx(100 * recorded)
        assert float(row[1]) == pytest.approx(100 * (recorded + 0.1))
        assert float(row[2]) == pytest.approx(50.0)
        assert float(row[3]) == pytest.approx(10.0) and float(row[4]) == pytest.approx(50.0 - 100 * recorded)
    avg = [100 * (a + (0.02 if DEFAULT_CONVENTION[t] == "acc_norm" else 0.0)) for t, a in ACCURACIES.items()]
    assert float(got["avg6 (%)"][0]) == pytest.approx(sum(avg) / 6)
    assert [float(v) for v in got["val_ppl"][:3]] == [21.5, 18.0, 17.0]
    assert float(got["val_ppl"][3]) == pytest.approx(-3.5) and float(got["val_ppl"][4]) == pytest.approx(-4.5)
    assert float(got["val_loss"][0]) == 3.068 and float(got["val_loss_ce"][0]) == 3.008
    assert float(got["val_ppl_ce"][0]) == 20.25
    assert got["val_loss"][1:] == ["not recorded", "not recorded", "-", "-"]  # never a made-up number
    assert [float(v) for v in got["val loss, last curve point"][:3]] == [3.5, 3.8, 3.2]


def test_a_run_directory_path_reads_the_same_run_and_missing_numbers_say_so(runs, tmp_path, capsys):
    root, plain, variant, _ = runs
    bare = make_run(tmp_path / "other", "base-s42", preset="smoke", accuracies=None, ppl=None, eval_rows=False)
    _validation(bare, VALIDATION)  # validated, never evaluated, no curve
    assert main(["compare", str(plain), str(variant), str(bare), "--format", "csv"]) == 0
    got = _csv(capsys)
    assert got["metric"][:3] == ["A base-s42@smoke", "B base-s42@smoke+train.steps=30,eval.limit=8",
                                 "C base-s42@smoke"]  # another root's run of A's hash: letter and path tell it apart
    assert float(got["val_ppl"][0]) == 21.5
    assert got["avg6 (%)"][2] == "not evaluated" and got["piqa acc_norm (%)"][2] == "not evaluated"
    assert got["val loss, last curve point"][2] == "not run"
    assert got["avg6 (%)"][4] == "-"


def _differs(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith("differs: "))
    return re.findall(r"(?:^differs: |; )([\w.]+) \(A ", line)


def test_the_header_names_exactly_the_keys_that_differ(runs, capsys):
    root, plain, variant, gated = runs
    assert main(["compare", "base-s42@smoke", "base-s42@smoke+train.steps=30,eval.limit=8", "--runs-dir",
                 str(root)]) == 0
    out = capsys.readouterr().out
    assert sorted(_differs(out)) == ["eval.limit", "train.steps"]
    steps = Registry().resolve("base-s42", preset="smoke").train.steps
    assert f"train.steps (A {steps}, B 30)" in out and "eval.limit (A null, B 8)" in out
    assert "B: base-s42@smoke+train.steps=30,eval.limit=8  (run " in out
    assert "overrides train.steps=30,eval.limit=8" in out
    notes = [line for line in out.splitlines() if line.startswith("not comparable")]
    assert len(notes) == 1 and notes[0].count("preset smoke (paper 450m) [A, B]") == 1  # each note once
    assert main(["compare", "base-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root)]) == 0
    assert _differs(capsys.readouterr().out) == ["model.gated"]
    assert main(["compare", "base-s42", str(plain), "--preset", "smoke", "--runs-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "differs: nothing in the resolved config" in out
    assert "| val_ppl | 21.50 | 21.50 | +0.00 |" in out


def test_the_overlay_has_one_line_per_run_each_in_its_own_colour_and_linestyle(runs, monkeypatch, tmp_path):
    root, *_ = runs
    drawn = {}

    def keep(fig, out_dir, stem):
        drawn["fig"] = fig
        return []

    monkeypatch.setattr(compare_figure, "save", keep)
    compared = read_operands(registry(), root, ["base-s42", "base-s42+train.steps=30,eval.limit=8", "gated-s42"],
                             preset="smoke")
    compare_figure.draw_compare(registry(), compared, tmp_path / "x.png")
    [ax] = drawn["fig"].axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["A base-s42@smoke", "B base-s42@smoke+train.steps=30,eval.limit=8",
                                                   "C gated-s42@smoke"]
    assert len({line.get_color() for line in lines}) == 3 and len({line.get_linestyle() for line in lines}) == 3
    assert len({line.get_marker() for line in lines}) == 3
    assert list(lines[1].get_xdata()) == [1000, 2000] and list(lines[1].get_ydata()) == [5.1, 3.8]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == [line.get_label() for line in lines]


def test_curves_writes_png_and_pdf_by_default_named_by_the_runs(runs, tmp_path, monkeypatch, capsys):
    root, *_ = runs
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "base-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root), "--curves"]) == 0
    wrote = [line.removeprefix("wrote ") for line in capsys.readouterr().out.splitlines() if line.startswith("wrote")]
    assert wrote == ["figures/compare-base-s42.smoke_vs_gated-s42.smoke.png",
                     "figures/compare-base-s42.smoke_vs_gated-s42.smoke.pdf"]
    assert (tmp_path / wrote[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["compare", "base-s42", "gated-s42", "--preset", "smoke", "--runs-dir", str(root),
                 "--curves", str(tmp_path / "out" / "c.png")]) == 0
    assert (tmp_path / "out" / "c.png").is_file() and (tmp_path / "out" / "c.pdf").is_file()


@pytest.mark.parametrize(("argv", "says"), [
    (["base-s42", "base-s42+train.steps=31"], "operand base-s42+train.steps=31: no finished run of base-s42 under "
     "preset smoke with --set train.steps=31 in {root} (fix: reproduce.py run base-s42 --preset smoke --set "
     "train.steps=31 --runs-dir {root})"),
    (["base-s42", "resformer-s42"], "operand resformer-s42: no finished run of resformer-s42 under preset smoke"),
    (["base-s42", "basee-s42"], "operand basee-s42: unknown spec 'basee-s42'"),
    (["base-s42", "base-s42@tiny"], "operand base-s42@tiny: unknown preset 'tiny'"),
    (["base-s42", "base-s42+train.nope=1"], "operand base-s42+train.nope=1: unknown key 'train.nope'"),
    (["base-s42", "base-s42+train.steps"], "operand base-s42+train.steps: 'train.steps' is not key=value"),
    (["base-s42"], "compare: needs 2 to 8 runs, got 1"),
    (["base-s42", "./nothere/abc"], "operand ./nothere/abc: no such run directory"),
    (["--curves", "base-s42", "gated-s42"], "--curves: 'base-s42' is not a .png path"),
])
def test_bad_operands_are_one_error_line_naming_them(runs, capsys, argv, says):
    root, *_ = runs
    assert main(["compare", *argv, "--preset", "smoke", "--runs-dir", str(root)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ERROR_LINE.match(err[0]), err
    assert says.format(root=root) in err[0]


def test_an_operand_under_another_preset_names_the_one_that_has_runs(runs, capsys):
    root, *_ = runs
    assert main(["compare", "base-s42", "gated-s42", "--preset", "450m", "--runs-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "(runs exist under preset smoke: write base-s42@smoke)" in err


def test_operand_syntax():
    assert parse_operand("e-exoformer-s42@smoke+train.steps=60,model.mix_paths=[q,k]").overrides == (
        "train.steps=60", "model.mix_paths=[q,k]")
    assert parse_operand("base-s42@1b").preset == "1b" and parse_operand("base-s42").preset is None
    assert parse_operand("results/runs/base-s42/ed99c603eb13").path == Path("results/runs/base-s42/ed99c603eb13")


def test_a_stale_run_named_by_its_path_is_told_apart_and_noted_once(runs, capsys):
    import shutil

    root, plain, *_ = runs
    stale = plain.parent / "000000000000"  # a run of an older definition of base-s42
    shutil.copytree(plain, stale)
    assert main(["compare", "base-s42", str(stale), "--preset", "smoke", "--runs-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"| metric | A base-s42@smoke#{plain.name} | B base-s42@smoke#000000000000 | B - A |" in out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "results from run 000000000000, not the current spec hash" in notes[0]


def test_a_damaged_run_is_an_error_line_not_a_column_of_numbers(runs, capsys):
    root, *_ = runs
    make_run(root, "resformer-s42", preset="smoke", accuracies={"piqa": 7.5})  # an accuracy outside [0, 1]
    assert main(["compare", "base-s42", "resformer-s42", "--preset", "smoke", "--runs-dir", str(root)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and ERROR_LINE.match(err[0]), err
    assert "operand resformer-s42: its run " in err[0] and "is DAMAGED" in err[0] and "--force" in err[0]


def test_a_run_without_a_curve_is_named_under_the_overlay_not_drawn(runs, monkeypatch, tmp_path):
    root, plain, *_ = runs
    bare = make_run(tmp_path / "other", "gated-s42", preset="smoke", accuracies=uniform(0.5))  # no metrics.jsonl
    drawn = {}
    monkeypatch.setattr(compare_figure, "save", lambda fig, out_dir, stem: drawn.setdefault("fig", fig) and [])
    compared = read_operands(registry(), root, [str(plain), str(bare)])
    compare_figure.draw_compare(registry(), compared, tmp_path / "x.png")
    fig = drawn["fig"]
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["A base-s42@smoke"]
    assert any("no validation curve (not drawn): B gated-s42@smoke" in text.get_text() for text in fig.texts)
