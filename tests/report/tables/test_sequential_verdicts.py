"""A declared sequential design read by `diff`, `claims` and the HTML report (issue 43 item 2): each claim's verdict
at the current look with the design's boundary, seeds added between looks, a claim that stops decided, and a design
edited after writing refused in one line. The rates of the design itself: tests/report/stats/test_sequential.py."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from scipy import stats

import synthetic
from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.registry import Registry
from exoformer.report.stats import sequential as sq
from exoformer.report.tables.verdicts import paper_differences
from ladder_registry import subset_registry
from synthetic import make_run, uniform, with_samples

ROWS = ["base", "gated", "dynamic-e-exoformer"]
SEEDS = [42, 1337, 2027, 3, 4, 5]
"""Six seeds per row: more than experiments/ holds (three), so the test registry declares them."""

# Per-seed values, chosen so the looks tell a story at alpha 0.05 (O'Brien-Fleming, seeds 2, 4, 6 per row):
# dynamic - gated avg6 +1.5, +2.0, +1.5, +2.0 is decided at look 2 (t 12 > 8.6); the other two continue.
GATED_ACC = [0.50, 0.505, 0.51, 0.50, 0.505, 0.50]
DYNAMIC_ACC = [0.515, 0.525, 0.525, 0.52, 0.515, 0.515]
BASE_ACC = [0.485, 0.515, 0.50, 0.515, 0.495, 0.485]
GATED_PPL = [14.5, 14.7, 14.5, 14.6, 14.55, 14.65]
DYNAMIC_PPL = [14.0, 14.0, 14.3, 13.7, 13.95, 14.15]
VALUES = {"gated": (GATED_ACC, GATED_PPL), "dynamic-e-exoformer": (DYNAMIC_ACC, DYNAMIC_PPL),
          "base": (BASE_ACC, [15.0] * 6)}


@pytest.fixture
def six_seeds(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """(registry directory, runs root): Table 1 cut to three rows, each with six seed specs."""
    directory, reported = subset_registry(tmp_path, ROWS)
    main_yaml = yaml.safe_load((directory / "main.yaml").read_text())
    main_yaml["groups"]["table1"]["sweeps"][0]["grid"]["seed"] = SEEDS
    (directory / "main.yaml").write_text(yaml.safe_dump(main_yaml, sort_keys=False))
    tables = yaml.safe_load((directory / "tables.yaml").read_text())
    for row in tables["tables"]["table1"]["rows"]:
        row["specs"] = [f"{row['id']}-s{s}" for s in SEEDS]
    (directory / "tables.yaml").write_text(yaml.safe_dump(tables, sort_keys=False))
    monkeypatch.setenv("EXOFORMER_REPORTED", str(reported))
    monkeypatch.setattr(synthetic, "_REGISTRY", Registry(directory))
    return directory, tmp_path / "runs"


def add_seeds(root: Path, row: str, seeds) -> None:
    """Smoke runs of seeds `seeds` (indices into SEEDS) of one row, with per-document scores as lm-eval writes them
    (results only: no training)."""
    accs, ppls = VALUES[row]
    for k in seeds:
        run = make_run(root, f"{row}-s{SEEDS[k]}", preset="smoke", accuracies=uniform(accs[k]), ppl=ppls[k],
                       stderr=0.02)
        with_samples(run, accs[k], shift=7 * k)


def declare(root: Path) -> sq.Design:
    """The design `budget table1 --looks 3` writes, six seeds per row, before any run."""
    registry = synthetic.registry()
    design = _design_like()
    root.mkdir(parents=True, exist_ok=True)
    sq.write_design(design, root, has_results=sq.table_has_results(registry, root, "table1"))
    return design


def reading(directory: Path, root: Path) -> list[str]:
    return ["--registry", str(directory), "--runs-dir", str(root), "--preset", "smoke"]


def diff(directory: Path, root: Path, capsys) -> str:
    code = main(["diff", "table1", *reading(directory, root), "--bootstrap", "200"])
    assert code in (0, 1)  # 1: a cell differs from the paper's (diff's exit), not the design
    return capsys.readouterr().out


def claim_lines(out: str) -> dict[str, str]:
    """claim label -> the design's line printed for it."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^  table1: (.+?): (look \d of 3: .*)$", out, re.M)}


def test_three_looks_name_the_look_and_a_claim_stops_decided(six_seeds, capsys):
    """Look 1: every claim continues; a seed run early waits for its look; look 2: the +1.47 claim stops decided;
    look 3: the others are decided, the stopped claim keeps its look-2 verdict."""
    directory, root = six_seeds
    declare(root)
    for row in ROWS:
        add_seeds(root, row, range(2))
    look1 = diff(directory, root, capsys)
    lines = claim_lines(look1)
    assert len(lines) == 3 and all(x.startswith("look 1 of 3: p ") and "continue to look 2" in x
                                   for x in lines.values()), look1
    assert "look 1 of 3; 3 continue" in look1 and "(fixed-seed verdict, not the design's: " in look1

    for row in ("gated", "dynamic-e-exoformer"):  # seed 3 of two rows only: look 2 needs 4 of every row
        add_seeds(root, row, range(2, 3))
    waiting = claim_lines(diff(directory, root, capsys))
    gain = waiting["dynamic-e-exoformer - gated, avg6"]
    assert gain.startswith("look 1 of 3") and "1 paired seed run beyond look 1 not used until look 2" in gain
    assert "not used" not in waiting["dynamic-e-exoformer - base, avg6"]

    add_seeds(root, "base", range(2, 3))
    for row in ROWS:
        add_seeds(root, row, range(3, 4))
    look2 = diff(directory, root, capsys)
    lines = claim_lines(look2)
    assert "look 2 of 3; 1 decided, 2 continue" in look2
    assert "stop: decided at look 2, same direction as the paper" in lines["dynamic-e-exoformer - gated, avg6"]
    assert "continue to look 3" in lines["dynamic-e-exoformer - base, avg6"]
    assert "continue to look 3" in lines["dynamic-e-exoformer - gated, val_ppl"]

    for row in ROWS:
        add_seeds(root, row, range(4, 6))
    look3 = diff(directory, root, capsys)
    lines = claim_lines(look3)
    assert all(x.startswith("look 3 of 3") for x in lines.values())
    assert "decided at look 2" in lines["dynamic-e-exoformer - gated, avg6"]  # a stopped claim stays stopped
    print("\n--- look 1\n" + _verdict_block(look1) + "\n--- look 2\n" + _verdict_block(look2) + "\n--- look 3\n"
          + _verdict_block(look3))


def test_a_row_no_open_claim_needs_is_not_waited_for(six_seeds, capsys, monkeypatch):
    """Both avg6 claims stop at look 2, so base is not run again: look 3 is taken once dynamic-e-exoformer and
    gated, the val_ppl claim's rows, have their six seeds."""
    directory, root = six_seeds
    monkeypatch.setitem(VALUES, "base", ([0.495, 0.50, 0.505, 0.495, 0.0, 0.0], [15.0] * 6))  # +2.0, +2.5, +2.0, +2.5
    declare(root)
    for row in ROWS:
        add_seeds(root, row, range(4))
    look2 = diff(directory, root, capsys)
    assert "look 2 of 3; 2 decided, 1 continue" in look2, look2
    assert main(["budget", "table1", "--next", *reading(directory, root)]) == 0
    plan = capsys.readouterr().out
    assert "look 2 of 3" in plan and "next look (3 of 3)" in plan, plan
    assert "run base-" not in plan and "-s" in plan, plan  # base serves no open claim; seeds already run are not asked
    asked = re.findall(r"reproduce.py run (\S+)", plan)
    assert sorted(asked) == sorted(f"{row}-s{SEEDS[k]}" for row in ("dynamic-e-exoformer", "gated") for k in (4, 5))
    for row in ("gated", "dynamic-e-exoformer"):
        add_seeds(root, row, range(4, 6))
    assert main(["budget", "table1", "--next", *reading(directory, root)]) == 0
    assert "look 3 of 3" in capsys.readouterr().out  # the same look as diff's, not held back by base
    lines = claim_lines(diff(directory, root, capsys))
    assert lines["dynamic-e-exoformer - gated, val_ppl"].startswith("look 3 of 3: p "), lines
    assert "at look 2: stop: decided at look 2" in lines["dynamic-e-exoformer - base, avg6"]


def test_a_missing_seed_holds_the_later_ones_back(six_seeds, capsys):
    """Seeds 1, 2 and 4 of every row (seed 3 not run): a look reads the first seeds in registry order, so look 2
    waits for seed 3 and the line says seed 4 is not used yet."""
    directory, root = six_seeds
    declare(root)
    for row in ROWS:
        add_seeds(root, row, [0, 1, 3])
    lines = claim_lines(diff(directory, root, capsys))
    assert all(x.startswith("look 1 of 3: p ") and "1 paired seed run beyond look 1 not used until look 2" in x
               for x in lines.values()), lines


def _verdict_block(out: str) -> str:
    return out.split("\nverdicts: ")[0]


def test_the_boundary_printed_is_the_declared_one(six_seeds, capsys):
    """Each open claim's printed boundary is the design's boundary at its look and family level, and nothing else."""
    directory, root = six_seeds
    design = declare(root)
    for row in ROWS:
        add_seeds(root, row, range(4))
    lines = claim_lines(diff(directory, root, capsys))
    decided = sum("stop: decided" in x for x in lines.values())
    for c in design.claims:
        line = lines[c.label]
        if "stop: decided" in line:
            continue
        printed = float(re.search(r"boundary ([0-9.e-]+)", line).group(1))
        declared = 2 * stats.t.sf(c.boundaries[len(design.claims) - decided - 1][1], c.pairs[1] - 1)
        assert f"{printed:.2g}" == f"{declared:.2g}" and math.isclose(printed, declared, rel_tol=0.05), (line, declared)


@pytest.mark.parametrize("field, value", [("alpha", 0.1), ("boundaries", None)])
def test_a_design_edited_after_results_is_refused_in_one_line(six_seeds, capsys, field, value):
    directory, root = six_seeds
    declare(root)
    for row in ROWS:
        add_seeds(root, row, range(2))
    path = sq.design_path(root, "table1")
    data = yaml.safe_load(path.read_text())
    if field == "alpha":
        data["alpha"] = value
    else:  # a lower boundary at look 2: the kind of edit that would let a claim through early
        data["claims"][0]["boundaries"][2][1] = 1.0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = root.parent / "report"
    for verb in (["diff", "table1", "--bootstrap", "200"], ["claims", "--bootstrap", "200"],
                 ["report", "table1", "--out", str(out)]):
        assert main([*verb, *reading(directory, root)]) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("report: ")]
        assert len(err) == 1 and "the design was edited after it was written" in err[0], err


def test_claims_and_the_html_report_give_the_looks_and_without_a_design_nothing_changes(six_seeds, capsys):
    directory, root = six_seeds
    for row in ROWS:
        add_seeds(root, row, range(4))
    plain = diff(directory, root, capsys)
    assert "look " not in plain and "declared sequential design" not in plain
    assert not sq.design_path(root, "table1").exists()
    with pytest.raises(UserError, match="already has results"):
        declare(root)  # a design chosen after seeing data is refused
    sq.write_design(_design_like(), root, has_results=False)  # as if declared before the runs (a test shortcut)
    assert main(["claims", *reading(directory, root), "--bootstrap", "200"]) == 0
    out = capsys.readouterr().out
    assert "declared sequential design of table1" in out and "look 2 of 3; 1 decided, 2 continue" in out
    assert "table1: dynamic-e-exoformer - gated, avg6: look 2 of 3: p " in out
    report = root.parent / "report"
    assert main(["report", "table1", *reading(directory, root), "--out", str(report)]) == 0
    page = (report / "index.html").read_text()
    assert '<span class="look">look 2 of 3: p ' in page and "stop: decided at look 2" in page
    assert '<p class="design">declared sequential design of table1' in page
    # the row's colour is the design's state at its look, not the fixed-seed verdict beside it
    assert page.count('<tr class="verdict-look-decided">') == 1 and page.count('<tr class="verdict-look-continue">') == 2
    from exoformer.report.pages.html import PAGE_STYLE
    from exoformer.report.tables.verdicts import LOOK_STATES

    assert all(f"tr.verdict-look-{state} td" in PAGE_STYLE for state in LOOK_STATES)


def _design_like() -> sq.Design:
    registry = synthetic.registry()
    plan = [sq.PlanClaim(label=f"{c.minuend} - {c.subtrahend}, {c.column}", minuend=c.minuend,
                         subtrahend=c.subtrahend, column=c.column, paper=c.value, sd=1.0 if c.column == "avg6" else 0.3)
            for c in paper_differences(registry) if c.table == "table1"]
    return sq.make_design("table1", plan, dict.fromkeys(ROWS, 6), looks=3, budget_gpu_hours=500.0,
                          hours_per_run=dict.fromkeys(ROWS, 20.0))
