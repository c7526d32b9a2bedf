"""Issue 41 item 1: `power TABLE` after the main job (one seed per row, preset smoke). Where the seed spread is not
measured, the output names the command that measures it (`run TABLE --all-seeds` with the --preset/--set read)
and its cost from the plan's cost model, writing nothing; a seed sd is given per metric (a bare number only for a
table of one metric); `power --effect` never assumes the item noise; the header says "given" of a given sd and
"measured over N seeds on preset P" only of a measured one. Synthetic runs roots (tests/synthetic.py), no training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.report.stats import replication as rep
from exoformer.runs.plan import plan, totals

from synthetic import make_run, registry, uniform

ACCS = {"dynamic-e-exoformer": [0.515, 0.52, 0.525], "gated": [0.50, 0.505, 0.51], "base": [0.50, 0.51, 0.50]}
PPLS = {"dynamic-e-exoformer": [14.0, 14.1, 13.9], "gated": [14.5, 14.7, 14.5], "base": [14.9, 14.8, 14.9]}


def main_job(root: Path, *, seeds: int = 1, overrides: tuple[str, ...] = ()) -> Path:
    """table1's rows at preset smoke, `seeds` seeds each (1: what `run table1 --preset smoke` leaves)."""
    for row in registry().tables["table1"].rows:
        for k in range(seeds):
            make_run(root, row.specs[k], preset="smoke", accuracies=uniform(ACCS.get(row.id, [0.5] * 3)[k]),
                     ppl=PPLS.get(row.id, [15.0] * 3)[k], overrides=overrides)
    return root


def _power(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["power", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("sets", [(), ("train.steps=30",)])
def test_an_unmeasured_spread_names_the_command_that_measures_it_and_its_cost(tmp_path, capsys, sets):
    """Was "one seed: the seed spread is not measured; give --seed-sd" per claim, no word of `--all-seeds`."""
    root = main_job(tmp_path / "runs", overrides=sets)
    before = _files(root)
    set_args = [arg for text in sets for arg in ("--set", text)]
    code, out, err = _power(capsys, "table1", "--preset", "smoke", *set_args, "--runs-dir", str(root))
    assert code == 0, err
    command = " ".join(["reproduce.py run table1 --preset smoke --all-seeds", *set_args, "--runs-dir", str(root)])
    total = totals(plan(registry(), "table1", preset="smoke", overrides=list(sets), runs_root=root, all_seeds=True))
    assert total["to_run"] == 18 and total["gpu_hours"] is None and total["cpu_minutes"] > 0
    lines = [line for line in out.splitlines() if "--all-seeds" in line]
    assert len(lines) == 1, out
    line = lines[0]
    assert f"`{command}` measures it (18 runs to add" in line, line
    assert f"{total['cpu_minutes']:,.1f} CPU-minutes on cpu" in line, line
    assert line.endswith("or give it: --seed-sd avg6=SD --seed-sd val_ppl=SD"), line
    assert _files(root) == before  # priced without writing anything
    code, out, _ = _power(capsys, "table1", "--preset", "smoke", *set_args, "--runs-dir", str(root), "--json")
    measure = json.loads(out)["measure_with"]
    assert measure["command"] == command and measure["to_run"] == 18 and measure["metrics"] == ["avg6", "val_ppl"]
    assert measure["cpu_minutes"] == pytest.approx(total["cpu_minutes"])


def test_a_seed_sd_is_given_per_metric(tmp_path, capsys):
    """Was one --seed-sd for avg6 (accuracy points) and val_ppl (perplexity) alike."""
    root = str(main_job(tmp_path / "runs"))
    code, out, err = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", root, "--seed-sd", "0.5")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: --seed-sd: ") and "avg6, val_ppl" in err, err
    assert "--seed-sd avg6=SD --seed-sd val_ppl=SD" in err, err
    code, out, err = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", root, "--json",
                            "--seed-sd", "avg6=0.5", "--seed-sd", "val_ppl=0.2")
    assert code == 0, err
    got = {(c["claim"], c["column"]): c for c in json.loads(out)["claims"]}
    ppl = got[("dynamic-e-exoformer - gated", "val_ppl")]
    gain = got[("dynamic-e-exoformer - gated", "avg6")]
    assert ppl["sd"] == 0.2 and ppl["seeds_per_row"] == rep.seeds_for_direction(0.55, sd=0.2, family=3)
    assert gain["sd"] == 0.5 and gain["seeds_per_row"] == rep.seeds_for_direction(1.47, sd=0.5, family=3)
    assert gain["sd_df"] is None  # a given sd is taken as known: no uncertainty to plan over
    # the size: 1.47 against 3 x 0.5 x 1.96 + 0.147 = 3.09 > 2 x 1.47: no count of ours tells 1.47 from 4.41
    assert gain["size_beyond_our_seeds"] and gain["size_seeds_per_row"] is None
    assert ppl["size_seeds_per_row"] == rep.seeds_for_size(-0.55, sd=0.2, family=3)
    assert ppl["sd_from"] == gain["sd_from"] == "given by --seed-sd"
    for bad, words in ((["--seed-sd", "acc=0.5"], "no claim in 'acc'"),
                       (["--seed-sd", "avg6=0.5", "--seed-sd", "avg6=0.6"], "avg6 is given with another"),
                       (["--seed-sd", "avg6=x"], "METRIC=SD")):
        code, out, err = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", root, *bad)
        assert code == 2 and err.startswith("error: --seed-sd: ") and err.count("\n") == 1 and words in err, err


def test_the_effect_form_refuses_a_missing_item_noise(capsys):
    """Was an item sd of 0 (and 1 item) assumed without a word."""
    code, out, err = _power(capsys, "--effect", "a=1", "--seed-sd", "0.5")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: --item-sd: the item noise is not given") and "--item-sd 0" in err, err
    code, out, err = _power(capsys, "--effect", "a=1", "--seed-sd", "0.5", "--item-sd", "2")
    assert code == 2 and err.startswith("error: --items: ") and err.count("\n") == 1, err
    code, out, err = _power(capsys, "--effect", "a=1", "--seed-sd", "0.5", "--item-sd", "0")
    assert code == 0 and f"needs {rep.seeds_for_direction(1.0, sd=0.5)} seeds per row" in out, err
    assert "for 80% power at its effect (+1)" in out, out
    code, out, err = _power(capsys, "--effect", "a=1", "--seed-sd", "0.5", "--item-sd", "2", "--items", "16")
    assert code == 0 and f"needs {rep.seeds_for_direction(1.0, sd=(0.25 + 4 / 16) ** 0.5)} seeds per row" in out, err
    code, out, err = _power(capsys, "--effect", "a=2", "--seed-sd", "0.3", "--item-sd", "0")
    k = rep.seeds_for_size(2.0, sd=0.3)
    assert code == 0 and k is not None and f"size: {k} seeds per row tell +2 from 3x it (+6)" in out, out


def test_the_header_never_says_measured_of_a_given_or_missing_spread(tmp_path, capsys):
    """Was "spread measured on preset smoke (given --seed-sd)", and "measured" with one seed per row."""
    one = str(main_job(tmp_path / "one"))
    out = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", one)[1]
    assert "seed sd not measured on preset smoke" in out.splitlines()[0], out
    assert "spread was measured" not in out and "spread measured" not in out, out
    given = ["--seed-sd", "avg6=0.5", "--seed-sd", "val_ppl=0.2"]
    header = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", one, *given)[1].splitlines()[0]
    assert "seed sd given by --seed-sd" in header and "measured" not in header, header
    three = str(main_job(tmp_path / "three", seeds=3))
    header = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", three)[1].splitlines()[0]
    assert "seed sd measured over 3 seeds on preset smoke" in header, header
    header = _power(capsys, "table1", "--preset", "smoke", "--runs-dir", three, "--seed-sd", "val_ppl=0.2")[1]
    assert "seed sd of avg6 measured over 3 seeds on preset smoke, of val_ppl given by --seed-sd" in header, header
