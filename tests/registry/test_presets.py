"""The shipped presets: the paper presets resolve the author's numerics, ablations the other reading."""

import json
from dataclasses import asdict

import pytest

from exoformer.cli import main
from exoformer.registry.registry import Registry
from exoformer.registry.reported import load_reported

SEEDS = [42, 1337, 2027]
# smoke identity: independent of the paper presets' recipe (they change with the spec schema, e.g. eval.precision,
# and with the smoke world's code; a change of the smoke recipe itself, e.g. its steps, is a new identity)
SMOKE_HASHES = {
    "base-s42": "1cf272a141ff15a26bbbae84d1277a322a4a774669de6c16ebeb16f7ca73c74c",
    "dynamic-e-exoformer-s42": "67c4c28c1b3325b4de832dbcced14aef42620bbcecbdbdce3ce488debc51a6cd",
}


@pytest.fixture(scope="module")
def registry():
    return Registry()


def show_json(capsys, *argv) -> dict:
    assert main(["show", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def without(section: dict, *keys: str) -> dict:
    return {k: v for k, v in section.items() if k not in keys}


def test_show_gated_s42_resolves_the_authors_precision_and_compile(capsys):
    train = show_json(capsys, "gated-s42")["spec"]["train"]
    assert train["precision"] == "official-pure-bf16" and train["compile"] is True


def test_every_paper_spec_outside_the_precision_ablation_trains_like_the_author(registry):
    ablation = set(registry.groups["precision"].specs)
    ladders = {name for table in registry.tables.values() for group in table.ladders
               for name in registry.groups[group].specs}  # forecast ladders at their own (CPU) preset
    assert ladders, "the ladder exclusion below must name the ladder specs"
    for name in sorted(set(registry.specs) - ladders):
        spec = registry.resolve(name)
        expected = "bf16-autocast" if name in ablation else "official-pure-bf16"
        assert spec.preset in ("450m", "1b") and spec.train.precision == expected, name
        assert spec.train.compile, name


def test_precision_ablation_differs_from_its_baseline_in_precision_only(capsys, registry):
    for variant in ("gated", "dynamic-e-exoformer"):
        for seed in SEEDS:
            base = show_json(capsys, f"{variant}-s{seed}")["spec"]
            ablated = show_json(capsys, f"{variant}-fp32-master-s{seed}")["spec"]
            assert ablated["train"]["precision"] == "bf16-autocast"
            assert without(ablated["train"], "precision") == without(base["train"], "precision")
            for section in ("model", "eval", "analysis"):
                assert ablated[section] == base[section], section
    rows = [r.specs for r in registry.tables["precision"].rows]
    assert rows == [tuple(f"{variant}{kind}-s{seed}" for seed in SEEDS)
                    for variant in ("gated", "dynamic-e-exoformer") for kind in ("", "-fp32-master")]


def test_lambda_init_variants_exist_and_are_named_in_a_table(registry):
    table = registry.tables["lambda-init"]
    assert "0.5" in table.title and "1.0" in table.title and "default 0.5" in table.paper_ref
    assert len(table.rows) == 6
    for text_row, code_row in zip(table.rows[::2], table.rows[1::2]):
        assert "paper text; default" in text_row.label and "author's code" in code_row.label
        for text_name, code_name in zip(text_row.specs, code_row.specs):
            text, code = registry.resolve(text_name), registry.resolve(code_name)
            assert (text.model.coef_init, code.model.coef_init) == (0.5, 1.0)
            assert not code.model.dynamic and code.model.anchor == "h0"
            assert without(asdict(code.model), "coef_init") == without(asdict(text.model), "coef_init")
            assert code.train == text.train and code.seed == text.seed
    assert {registry.resolve(r.specs[0]).model.granularity for r in table.rows} == {"elementwise", "headwise",
                                                                                    "scalar"}


def test_new_tables_never_claim_numbers_of_unknown_provenance(registry):
    cells = load_reported(registry)
    for column in ("val_ppl", "avg6"):
        for row, table1_row in (("gated-pure-bf16", "gated"), ("dynamic-e-exoformer-pure-bf16",
                                                               "dynamic-e-exoformer")):
            assert cells[("precision", row, column)].value == cells[("table1", table1_row, column)].value
        assert cells.get(("precision", "gated-fp32-master", column)) is None  # no line: not reported
    assert all(cells.get(("lambda-init", r.id, c)) is None for r in registry.tables["lambda-init"].rows
               for c in registry.tables["lambda-init"].columns)


def test_smoke_preset_keeps_its_numerics_and_its_hashes(registry):
    smoke = registry.resolve("gated-s42", preset="smoke")
    assert smoke.train.precision == "auto" and smoke.train.compile is False
    for name, expected in SMOKE_HASHES.items():  # existing smoke run directories keep their identity
        assert registry.resolve(name, preset="smoke").hash == expected, name


def test_ablations_stay_distinct_runs_under_the_smoke_preset(registry):
    for ablated, base in (("gated-fp32-master-s42", "gated-s42"), ("e-exoformer-lambda1-s42", "e-exoformer-s42"),
                          ("s-exoformer-lambda1-s1337", "s-exoformer-s1337")):
        assert registry.resolve(ablated, preset="smoke").hash != registry.resolve(base, preset="smoke").hash


def test_lambda_init_choice_is_stated_in_the_tables_notes(registry, tmp_path, capsys):
    from exoformer.cli import main

    notes = registry.tables["lambda-init"].notes
    assert any("0.5" in n and "1.0" in n for n in notes)
    assert main(["table", "lambda-init", "--preset", "smoke", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(f"Note: {n}" in out for n in notes)
