"""`table`: reproduced beside reported, "not run" cells, conventions, bad input as one-line errors."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


from synthetic import make_run, read_table, registry, selection, uniform

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.registry import REPO_ROOT, Registry
from exoformer.report.tables.build import render


def test_a_runs_long_rows_have_the_documented_columns_and_strip_the_smoke_prefix(tmp_path):
    make_run(tmp_path, "base-s42", preset="smoke", accuracies=uniform(0.5), task_prefix="smoke_")
    frame = selection(tmp_path, preset="smoke").pick("base-s42").rows
    assert list(frame.columns[:8]) == ["spec", "seed", "preset", "task", "metric", "value", "stderr", "n"]
    assert set(frame["task"]) == {"arc_challenge", "arc_easy", "hellaswag", "openbookqa", "piqa", "winogrande",
                                  "validation"}
    assert selection(tmp_path, preset="450m").pick("base-s42") is None


def test_missing_runs_read_not_run_and_the_rest_renders(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.40), acc_norm_offset=0.02, ppl=15.25)
    code = main(["table", "table1", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    base = next(line for line in out.splitlines() if line.startswith("| Base Transformer"))
    gated = next(line for line in out.splitlines() if line.startswith("| Gated Attention"))
    assert "15.25 / 14.79" in base
    assert "42.00 / not known" in base  # arc_challenge uses acc_norm by default: 0.40 + 0.02
    # avg6: five acc_norm (42) and WinoGrande acc (40) -> 41.67
    assert "41.67 / 48.14" in base
    assert gated.count("not run") == 8
    assert "acc_norm for arc_challenge" in out and "acc for winogrande" in out


def test_seed_replicates_give_mean_and_spread(tmp_path):
    make_run(tmp_path, "base-s42", ppl=15.0)
    make_run(tmp_path, "base-s1337", ppl=16.0)
    built = read_table(tmp_path, "table1")
    cell = built.cells[("base", "val_ppl")]
    assert cell.value == pytest.approx(15.5)
    assert cell.seed_sd == pytest.approx(0.7071, abs=1e-4)
    assert cell.seeds == (42, 1337)


def test_long_and_latex_formats(tmp_path):
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.5), ppl=14.0)
    built = read_table(tmp_path, "table1")
    csv = render(built, "long")
    assert csv.splitlines()[0].startswith("table,row,label,column,metric,reproduced")
    assert "table1,gated,Gated Attention,val_ppl,,14.0," in csv
    latex = render(built, "latex")
    assert r"\begin{tabular}" in latex and "14.00 (14.64)" in latex and "avg6" not in latex.split("avg6", 1)[0][-1:]


def test_table_out_writes_a_file(tmp_path, capsys):
    (tmp_path / "runs").mkdir()  # the output directory lies outside the runs root (inside it is refused)
    assert main(["table", "table1", "--runs-dir", str(tmp_path / "runs"), "--format", "csv", "--out",
                 str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "table1.csv").is_file()


def test_a_variant_table_is_written_beside_the_default_never_over_it(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    out = tmp_path / "o"
    common = ["--runs-dir", str(tmp_path / "runs"), "--format", "md", "--out", str(out)]
    assert main(["table", "table1", *common]) == 0
    default = (out / "table1.md").read_text()
    assert main(["table", "table1", *common, "--set", "train.steps=30", "--preset", "smoke"]) == 0
    assert (out / "table1.md").read_text() == default
    assert (out / "table1.smoke+train.steps-30.md").is_file()
    long_sets = [arg for i in range(12) for arg in ("--set", f"train.warmup_steps={i}")]
    assert main(["table", "table1", *common, *long_sets]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 3 and all(len(n) < 100 for n in names), names


def test_run_without_eval_results_is_a_one_line_error(tmp_path, capsys):
    make_run(tmp_path, "base-s42", accuracies=None, ppl=None)
    assert main(["table", "table1", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no eval results" in err and "base-s42" in err


def test_unfinished_run_without_results_is_not_run(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=None, ppl=None, state="RUNNING")
    built = read_table(tmp_path, "table1")
    assert built.cells[("base", "avg6")].value is None


def _registry_copy(tmp_path: Path, old: str, new: str) -> Registry:
    directory = tmp_path / "experiments"
    shutil.copytree(REPO_ROOT / "experiments", directory)
    tables = directory / "tables.yaml"
    text = tables.read_text()
    assert old in text
    tables.write_text(text.replace(old, new, 1))
    return Registry(directory)


def test_table_naming_an_unknown_metric_is_a_one_line_error(tmp_path):
    reg = _registry_copy(tmp_path, "columns: [val_ppl, arc_challenge,", "columns: [val_pplx, arc_challenge,")
    with pytest.raises(UserError) as err:
        read_table(tmp_path, "table1", reg=reg)
    assert "val_pplx" in str(err.value) and "does not exist" in str(err.value) and "val_ppl" in err.value.fix
    assert "\n" not in str(err.value)


def test_convention_naming_a_metric_the_results_lack_is_a_one_line_error(tmp_path):
    line = '    columns: [val_ppl, arc_challenge, arc_easy, hellaswag, openbookqa, piqa, winogrande, avg6]\n'
    reg = _registry_copy(tmp_path, line, line + '    convention: {winogrande: acc_norm}\n')
    make_run(tmp_path, "base-s42", accuracies=uniform(0.5))
    with pytest.raises(UserError) as err:
        read_table(tmp_path, "table1", reg=reg)
    assert "'acc_norm' does not exist for task 'winogrande'" in str(err.value)


def test_unknown_table_suggests(tmp_path):
    with pytest.raises(UserError, match="did you mean 'table1'"):
        read_table(tmp_path, "tabel1")


def test_stale_run_is_used_with_a_note(tmp_path):
    run = make_run(tmp_path, "base-s42", ppl=15.0)
    run.rename(run.parent / "000000000000")
    built = read_table(tmp_path, "table1")
    assert built.cells[("base", "val_ppl")].value == 15.0
    assert any("stale" in note for note in built.notes)


def test_table_and_diff_never_import_torch(tmp_path):
    import subprocess

    make_run(tmp_path, "base-s42", accuracies=uniform(0.485), ppl=14.9)
    code = ("import sys; from exoformer.cli import main; "
            f"rc = [main(['table', 'table1', '--runs-dir', {str(tmp_path)!r}]), "
            f"main(['diff', 'table1', '--runs-dir', {str(tmp_path)!r}])]; "
            "assert rc == [0, 0], rc; assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_table_without_reported_numbers_reads_not_reported(tmp_path):
    reg = _registry_copy(tmp_path, "tables:\n", "tables:\n  ours-only:\n    title: ours\n    columns: [val_ppl]\n"
                                                 "    rows:\n      - {id: base, label: Base, specs: [base-s42]}\n")
    make_run(tmp_path / "runs", "base-s42", ppl=15.0)
    built = read_table(tmp_path / "runs", "ours-only", reg=reg)
    assert "| Base | 15.00 / not known |" in render(built, "md")


def test_rank_agreement_counts_only_rows_with_both_values():
    from exoformer.report.stats.rank import kendall_tau_b

    nan = float("nan")
    assert kendall_tau_b([nan] * 5, [1.0, 2.0, 3.0, 4.0, 5.0]) is None  # nothing to rank: no agreement, not -1.00
    assert kendall_tau_b([1.0, nan, 3.0, 2.0], [1.0, 9.0, 3.0, 2.0]) == 1.0
    assert kendall_tau_b([1.0, None, 2.0], [2.0, 1.0, 1.0]) == -1.0
