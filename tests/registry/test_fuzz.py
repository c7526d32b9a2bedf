"""Fuzz `validate` with mutated registry files: every one must give exit 2 and exactly one `error:` line naming
file:line (or file and field), the problem and, where one exists, a suggestion. Never a traceback.

Most cases run in-process against a temporary copy of the registry (fast); a few run through reproduce.py.
The input-limit classes (LIMIT_CLASSES, exoformer/limits.py) are generated from a fixed seed: non-finite
numbers, out-of-range values, bad names, shadowing names, YAML size/depth/alias budgets, sweep sizes,
paths outside the registry, and `--set` values through `show`.
"""

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exoformer import limits
from exoformer.cli import main
from exoformer.registry.registry import DEFAULT_REGISTRY, Registry
from exoformer.registry.reported import DEFAULT_REPORTED
from exoformer.registry.spec import FIELD_TYPES

REPO = Path(__file__).resolve().parents[2]
FUZZ_OK = {"groups": {"fuzz": {"why": "fuzz group", "specs": {"fuzz-spec": {"variant": "e-exoformer", "seed": 5}}}}}


def _wrong_values(type_name):
    base = type_name.removesuffix(" | None")
    return {"int": ["abc", [1], 1.5], "float": ["fast", [0.1]], "bool": ["maybe", 3], "str": [12, ["a"]],
            "tuple[str, ...]": ["q", [1, 2]]}[base]


def _typo(name):
    return name[:-1] if len(name) > 3 else name + "x"


def _spec_case(body):
    data = yaml.safe_load(yaml.safe_dump(FUZZ_OK))
    data["groups"]["fuzz"]["specs"]["fuzz-spec"].update(body)
    return {"fuzz.yaml": yaml.safe_dump(data, sort_keys=False)}


def _nest(dotted, value):
    if "." in dotted:
        section, key = dotted.split(".", 1)
        return {section: {key: value}}
    return {dotted: value}


def _cases():
    cases = []
    for key, type_name in FIELD_TYPES.items():  # wrong types for every field
        for i, bad in enumerate(_wrong_values(type_name)):
            cases.append((f"type-{key}-{i}", _spec_case(_nest(key, bad)), ["fuzz.yaml:", key]))
    for key in FIELD_TYPES:  # misspelt keys: a did-you-mean
        if key in ("note",):
            continue
        typo = ".".join([*key.split(".")[:-1], _typo(key.split(".")[-1])])
        cases.append((f"typo-{key}", _spec_case(_nest(typo, 1)), ["fuzz.yaml:", "did you mean"]))
    values = [("model.n_layer", 0), ("model.n_head", 7), ("model.anchor", "h3"), ("model.granularity", "rowwise"),
              ("model.mix_paths", ["v", "q"]), ("model.anchor_norm_paths", ["x"]), ("train.steps", -1),
              ("train.precision", "bf16"), ("train.batch_tokens", 1000), ("train.decay_fraction", 2.0),
              ("train.seq_len", 100000), ("eval.suite", "paperr"), ("eval.num_fewshot", -1), ("eval.limit", 0),
              ("analysis.probes", ["token_similarty"]), ("analysis.ablations", ["anchors"]),
              ("analysis.n_sequences", 0), ("analysis.seq_len", 999999), ("train.micro_batch_seqs", 3)]
    for key, bad in values:
        cases.append((f"value-{key}", _spec_case(_nest(key, bad)), ["fuzz.yaml:", key.split(".")[0]]))
    for name, body, expect in [
        ("bad-variant", {"variant": "e-exoformr"}, ["fuzz.yaml:", "did you mean"]),
        ("bad-preset", {"preset": "451m"}, ["fuzz.yaml:", "did you mean"]),
        ("bad-shape-map", {"shape": "1b"}, ["fuzz.yaml:", "shape"]),
        ("bad-shape-name", {"shape": {"450m": "2b"}}, ["fuzz.yaml:", "unknown shape"]),
        ("train-seed", {"train": {"seed": 3}}, ["fuzz.yaml:", "seed"]),
        ("section-not-map", {"model": 3}, ["fuzz.yaml:", "model"]),
        ("unknown-top", {"varient": "base"}, ["fuzz.yaml:", "did you mean 'variant'"]),
        ("same-config", {"variant": "base", "seed": 42}, ["fuzz.yaml:", "same config"]),
        ("anchor-without-mix", {"variant": "base", "model": {"anchor": "h0"}}, ["fuzz.yaml:", "anchor"]),
        ("g-without-gate", {"variant": "base", "model": {"mix_paths": ["g"], "anchor": "h0"}}, ["fuzz.yaml:", "mix_paths"]),
    ]:
        cases.append((name, _spec_case(body), expect))
    fz = "groups:\n  fuzz:\n    why: fuzz group\n"
    structural = {
        "dup-spec-name": ({"fuzz.yaml": fz + "    specs:\n      base-s42: {variant: base}\n"}, ["fuzz.yaml:5", "duplicate"]),
        "dup-group": ({"fuzz.yaml": "groups:\n  table1:\n    why: x\n"}, ["fuzz.yaml:2", "duplicate group"]),
        "no-variant": ({"fuzz.yaml": fz + "    specs:\n      a1: {seed: 1}\n"}, ["fuzz.yaml:5", "variant"]),
        "no-why": ({"fuzz.yaml": "groups:\n  fuzz:\n    specs:\n      a1: {variant: base}\n"}, ["fuzz.yaml:2", "why"]),
        "bad-name": ({"fuzz.yaml": fz + "    specs:\n      Bad*Name: {variant: base}\n"}, ["fuzz.yaml:5", "invalid"]),
        "group-typo": ({"fuzz.yaml": fz + "    spec:\n      a1: {variant: base}\n"}, ["fuzz.yaml:4", "did you mean"]),
        "file-typo": ({"fuzz.yaml": "group:\n  fuzz: {why: x}\n"}, ["fuzz.yaml:1", "did you mean 'groups'"]),
        "not-a-mapping": ({"fuzz.yaml": "- a\n- b\n"}, ["fuzz.yaml:1"]),
        "specs-list": ({"fuzz.yaml": fz + "    specs: [a, b]\n"}, ["fuzz.yaml:4", "specs"]),
        "sweep-bad-placeholder": ({"fuzz.yaml": fz + "    sweeps:\n      - name: \"x-{sed}\"\n        grid: {seed: [1]}\n"
                                                "        variant: base\n"}, ["fuzz.yaml:5", "did you mean"]),
        "sweep-empty-axis": ({"fuzz.yaml": fz + "    sweeps:\n      - name: \"x-{seed}\"\n        grid: {seed: []}\n"
                                           "        variant: base\n"}, ["fuzz.yaml:", "empty"]),
        "sweep-no-grid": ({"fuzz.yaml": fz + "    sweeps:\n      - name: x\n        variant: base\n"}, ["fuzz.yaml:5", "grid"]),
        "sweep-axis-not-key": ({"fuzz.yaml": fz + "    sweeps:\n      - name: \"x-{foo}\"\n        grid: {foo: [1]}\n"
                                             "        variant: base\n"}, ["fuzz.yaml:", "not a spec key"]),
        "sweep-dup-names": ({"fuzz.yaml": fz + "    sweeps:\n      - name: \"xx\"\n        grid: {seed: [1, 2]}\n"
                                          "        variant: base\n"}, ["fuzz.yaml:", "duplicate"]),
        "sweep-bad-value": ({"fuzz.yaml": fz + "    sweeps:\n      - name: \"x-{seed}\"\n        grid: {seed: [1, two]}\n"
                                          "        variant: base\n"}, ["fuzz.yaml:6", "seed"]),
        "broken-yaml-bracket": ({"fuzz.yaml": "groups: [\n  fuzz: 1\n"}, ["fuzz.yaml:", "invalid YAML"]),
        "broken-yaml-indent": ({"fuzz.yaml": "groups:\n  fuzz:\n    why: a\n   specs: 1\n"}, ["fuzz.yaml:", "invalid YAML"]),
        "broken-yaml-tab": ({"fuzz.yaml": "groups:\n\tfuzz: 1\n"}, ["fuzz.yaml:2", "invalid YAML"]),
        "broken-yaml-quote": ({"fuzz.yaml": "groups:\n  fuzz:\n    why: \"open\n"}, ["fuzz.yaml:", "invalid YAML"]),
        "dup-key": ({"fuzz.yaml": fz + "    why: again\n"}, ["fuzz.yaml:4", "duplicate key"]),
        "include-cycle": ({"fuzz.yaml": "include: [cyc.yaml]\n", "cyc.yaml": "include: [fuzz.yaml]\n"},
                          ["include cycle", "fuzz.yaml", "cyc.yaml"]),
        "include-self": ({"fuzz.yaml": "include: [fuzz.yaml]\n"}, ["include cycle", "fuzz.yaml"]),
        "include-missing": ({"fuzz.yaml": "include: [tabels.yaml]\n"}, ["fuzz.yaml:1", "did you mean 'tables.yaml'"]),
        "include-not-list": ({"fuzz.yaml": "include: tables.yaml\n"}, ["fuzz.yaml:1", "include"]),
        "unreached-file": ({"orphan.yaml": "groups: {}\n"}, ["orphan.yaml", "include"]),
        "table-missing-spec": ({"fuzz.yaml": "tables:\n  t9:\n    title: x\n    columns: [val_ppl]\n    rows:\n"
                                             "      - {id: r, label: R, specs: [base-s43]}\n"},
                               ["fuzz.yaml:6", "did you mean 'base-s42'"]),
        "table-bad-column": ({"fuzz.yaml": "tables:\n  t9:\n    title: x\n    columns: [val_pl]\n    rows:\n"
                                           "      - {id: r, label: R, specs: [base-s42]}\n"}, ["fuzz.yaml:2", "did you mean"]),
        "table-dup-id": ({"fuzz.yaml": "tables:\n  table1: {title: x, columns: [val_ppl], rows: [{id: r, label: R, specs: [base-s42]}]}\n"},
                         ["fuzz.yaml:2", "duplicate table"]),
        "table-no-rows": ({"fuzz.yaml": "tables:\n  t9: {title: x, columns: [val_ppl]}\n"}, ["fuzz.yaml:2", "rows"]),
        "table-bad-convention": ({"fuzz.yaml": "tables:\n  t9: {title: x, columns: [piqa], convention: {piqa: f1}, "
                                               "rows: [{id: r, label: R, specs: [base-s42]}]}\n"}, ["fuzz.yaml:2", "acc"]),
        "table-dup-row": ({"fuzz.yaml": "tables:\n  t9:\n    title: x\n    columns: [val_ppl]\n    rows:\n"
                                        "      - {id: r, label: R, specs: [base-s42]}\n      - {id: r, label: S, specs: [gated-s42]}\n"},
                          ["fuzz.yaml:7", "duplicate row"]),
        "figure-missing-spec": ({"fuzz.yaml": "figures:\n  f9: {title: x, kind: curves, specs: [gated-s41], series: [val_loss]}\n"},
                                ["fuzz.yaml:2", "did you mean"]),
        "figure-bad-kind": ({"fuzz.yaml": "figures:\n  f9: {title: x, kind: curve, specs: [gated-s42], series: [val_loss]}\n"},
                            ["fuzz.yaml:2", "did you mean 'curves'"]),
        "figure-bad-series": ({"fuzz.yaml": "figures:\n  f9: {title: x, kind: curves, specs: [gated-s42], series: [val_los]}\n"},
                              ["fuzz.yaml:2", "did you mean 'val_loss'"]),
        "figure-bad-table": ({"fuzz.yaml": "figures:\n  f9: {title: x, kind: curves, specs: ['table:tabel1'], series: [val_loss]}\n"},
                             ["fuzz.yaml:2", "did you mean 'table1'"]),
        "preset-dup": ({"fuzz.yaml": "presets:\n  smoke: {why: x, shape: smoke}\n"}, ["fuzz.yaml:2", "duplicate preset"]),
        "preset-no-why": ({"fuzz.yaml": "presets:\n  p2: {shape: smoke}\n"}, ["fuzz.yaml:2", "why"]),
        "preset-bad-shape": ({"fuzz.yaml": "presets:\n  p2: {why: x, shape: [a]}\n"}, ["fuzz.yaml:2", "shape"]),
        "preset-unknown-shape": ({"fuzz.yaml": "presets:\n  p2: {why: x, shape: smok}\n"}, ["fuzz.yaml:2", "did you mean 'smoke'"]),
        "preset-bad-profile": ({"fuzz.yaml": "presets:\n  p2: {why: x, shape: smoke, profile: h10}\n"}, ["fuzz.yaml:2", "did you mean"]),
        "preset-variant-key": ({"fuzz.yaml": "presets:\n  p2: {why: x, shape: smoke, variant: base}\n"}, ["fuzz.yaml:2", "variant"]),
        "preset-bad-train": ({"fuzz.yaml": "presets:\n  p2:\n    why: x\n    shape: smoke\n    train: {stepz: 3}\n"},
                             ["fuzz.yaml:5", "did you mean 'train.steps'"]),
        "shape-bad-field": ({"fuzz.yaml": "shapes:\n  s9: {n_layers: 3}\n"}, ["fuzz.yaml:2", "did you mean 'n_layer'"]),
        "shape-clash": ({"fuzz.yaml": "shapes:\n  smoke: {n_layer: 3}\n"}, ["fuzz.yaml:2", "variants.yaml"]),
        "shape-bad-type": ({"fuzz.yaml": "shapes:\n  s9: {n_layer: three}\n"}, ["fuzz.yaml:2", "integer"]),
        "metric-bad-better": ({"fuzz.yaml": "metrics:\n  m9: {description: x, better: up}\n"}, ["fuzz.yaml:2", "better"]),
    }
    for name, (files, expect) in structural.items():
        cases.append((name, files, expect))
    return cases


def _reported_cases():
    """Mutations of reported.yaml: (old text, new text, expected substrings)."""
    return [
        ("base:\n      val_ppl: {value: 14.79, source: WEB, version: v4}", "base:\n      val_ppl: {value: 14.79, source: WEBB, version: v4}",
         ["reported.yaml:", "did you mean 'WEB'"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_ppl: {value: '14.79', source: WEB, version: v4}",
         ["reported.yaml:", "number"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_ppl: {value: 14.79, source: WEB, version: v5}",
         ["reported.yaml:", "version"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_pl: {value: 14.79, source: WEB, version: v4}",
         ["reported.yaml:", "did you mean 'val_ppl'"]),
        ("  table1:\n    base:", "  table1:\n    bse:", ["reported.yaml:", "did you mean 'base'"]),
        ("  table1:\n    base:", "  tabel1:\n    base:", ["reported.yaml:", "did you mean 'table1'"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_ppl: {value: null}", ["reported.yaml:", "reason"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_ppl: {value: 14.79, source: WEB, version: v4, guess: 1}",
         ["reported.yaml:", "guess"]),
        ("paper:", "papers:", ["reported.yaml:", "did you mean 'paper'"]),
        ("tables:\n", "differences: []\ntables:\n", ["reported.yaml:", "unknown section 'differences'"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_ppl: {value: .nan, source: WEB, version: v4}",
         ["reported.yaml:", "finite"]),
        ("val_ppl: {value: 14.79, source: WEB, version: v4}", "val_ppl: {value: -.inf, source: WEB, version: v4}",
         ["reported.yaml:", "finite"]),
    ]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    reg = root / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, reg)
    text = (reg / "registry.yaml").read_text()
    (reg / "registry.yaml").write_text(text.rstrip() + "\n  - fuzz.yaml\n")
    (reg / "fuzz.yaml").write_text(yaml.safe_dump(FUZZ_OK))
    reported = root / "reported.yaml"
    shutil.copy(DEFAULT_REPORTED, reported)
    return reg, reported


def _validate(capsys, reg, reported):
    code = main(["validate", "--registry", str(reg), "--reported", str(reported)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_unmutated_copy_validates(workspace, capsys):
    code, out, err = _validate(capsys, *workspace)
    assert code == 0, err


CASES = _cases()
REPORTED_CASES = _reported_cases()


def test_there_are_at_least_200_mutations():
    assert len(CASES) + len(REPORTED_CASES) >= 200


def _check(code, err, expect, case_id):
    assert code == 2, f"{case_id}: exit {code}, stderr {err!r}"
    assert err.startswith("error: ") and err.count("\n") == 1, f"{case_id}: not one line: {err!r}"
    assert "Traceback" not in err
    for piece in expect:
        assert piece in err, f"{case_id}: {piece!r} not in {err!r}"


@pytest.mark.parametrize("case_id,files,expect", CASES, ids=[c[0] for c in CASES])
def test_mutated_registry_file_gives_one_line_error(workspace, capsys, case_id, files, expect):
    reg, reported = workspace
    originals = {name: (reg / name).read_text() if (reg / name).exists() else None for name in files}
    try:
        for name, text in files.items():
            (reg / name).write_text(text)
        code, _, err = _validate(capsys, reg, reported)
    finally:
        for name, text in originals.items():
            if text is None:
                (reg / name).unlink()
            else:
                (reg / name).write_text(text)
    _check(code, err, expect, case_id)


@pytest.mark.parametrize("i", range(len(REPORTED_CASES)))
def test_mutated_reported_yaml_gives_one_line_error(workspace, capsys, i):
    reg, reported = workspace
    old, new, expect = REPORTED_CASES[i]
    original = reported.read_text()
    assert old in original, old
    try:
        reported.write_text(original.replace(old, new, 1))
        code, _, err = _validate(capsys, reg, reported)
    finally:
        reported.write_text(original)
    _check(code, err, expect, f"reported-{i}")


@pytest.mark.parametrize("files", [{"fuzz.yaml": "groups: [\n"}, {"fuzz.yaml": "include: [fuzz.yaml]\n"}])
def test_a_few_mutations_through_the_real_entry_point(tmp_path, files):
    reg = tmp_path / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, reg)
    (reg / "registry.yaml").write_text((reg / "registry.yaml").read_text().rstrip() + "\n  - fuzz.yaml\n")
    for name, text in files.items():
        (reg / name).write_text(text)
    res = subprocess.run([sys.executable, "reproduce.py", "validate"], cwd=REPO, capture_output=True, text=True,
                         env={"EXOFORMER_REGISTRY": str(reg), "PATH": ""}, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "fuzz.yaml" in res.stderr and "Traceback" not in res.stderr


# ---------------------------------------------------------------------------------------------------------
# Input limits: generated mutation classes

FUZZ_SEED = 20260108
FLOAT_FIELDS = [k for k, t in FIELD_TYPES.items() if t == "float"]
RANGES = {  # field -> values just outside (or far outside) its documented range
    **{f"train.{n}": [0.0, -1e-9, -0.5] for n in ("muon_lr", "adam_lr", "coef_lr", "adam_eps", "grad_clip")},
    **{f"train.{n}": [1.0, 5, -0.1] for n in ("adam_beta1", "adam_beta2", "muon_beta2", "muon_momentum",
                                               "muon_momentum_start")},
    **{f"train.{n}": [-0.1, -3] for n in ("muon_weight_decay", "adam_weight_decay", "z_loss")},
    "train.final_lr_fraction": [-0.1, 1.5],
    **{f"train.{n}": [-1, -100] for n in ("warmup_steps", "muon_momentum_steps", "val_every")},
    "seed": [-1, 2 ** 32, 2 ** 64],
    "model.rope_theta": [0.0, -10.0], "model.norm_eps": [0.0, -1e-6], "model.init_std": [0.0],
}
BAD_NAMES = {"newline": "fz-nl\n", "upper": "Fz-Upper", "dash-first": "-fz", "slash": "fz/x", "dotdot": "../fz",
             "space": "fz x", "glob": "fz*", "unicode": "fz-\u00e9", "long-101": "f" * 101, "long-300": "z" * 300,
             "empty": "", "tab": "fz\tx"}


def _q(name):
    """A YAML double-quoted scalar for any string (json escapes are valid YAML)."""
    import json
    return json.dumps(name)


ROW = "{id: r, label: R, specs: [base-s42]}"


def _names_of_kind(kind, name):
    fz = "groups:\n  fuzz:\n    why: fuzz group\n"
    return {
        "spec": fz + f"    specs:\n      {_q(name)}: {{variant: base, seed: 9}}\n",
        "group": f"groups:\n  {_q(name)}:\n    why: x\n",
        "table": f"tables:\n  {_q(name)}: {{title: x, columns: [val_ppl], rows: [{ROW}]}}\n",
        "figure": f"figures:\n  {_q(name)}: {{title: x, kind: curves, specs: [base-s42], series: [val_loss]}}\n",
        "preset": f"presets:\n  {_q(name)}: {{why: x, shape: smoke}}\n",
        "shape": f"shapes:\n  {_q(name)}: {{n_layer: 2}}\n",
        "metric": f"metrics:\n  {_q(name)}: {{description: x, better: lower}}\n",
        "row": f"tables:\n  t9: {{title: x, columns: [val_ppl], rows: [{ROW.replace('id: r', 'id: ' + _q(name))}]}}\n",
        "label": fz + "    sweeps:\n      - name: \"x-{lr}\"\n        variant: base\n"
                      f"        grid:\n          lr: {{{_q(name)}: {{train.muon_lr: 0.02}}}}\n",
    }[kind]


def _alias_bomb(rng):
    width, depth = rng.randint(6, 12), rng.randint(6, 9)
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, depth):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n", width ** depth


def _limit_cases():
    rng = random.Random(FUZZ_SEED)
    cases = []  # (class, id, files, expect)
    for key in FLOAT_FIELDS:  # non-finite numbers in every float field
        for bad in (".nan", ".inf", "-.inf"):
            section, field = key.split(".")
            files = {"fuzz.yaml": _spec_yaml(f"{section}: {{{field}: {bad}}}")}
            cases.append(("nonfinite", f"nonfinite-{key}-{bad}", files, ["fuzz.yaml:", key, "finite"]))
    for key in ("rope_theta", "coef_init", "init_std"):  # non-finite in variants.yaml and in a shapes: section
        bad = rng.choice([".nan", ".inf", "-.inf"])
        cases.append(("nonfinite", f"nonfinite-shape-{key}", {"fuzz.yaml": f"shapes:\n  s9: {{{key}: {bad}}}\n"}
                      if key != "coef_init" else {"fuzz.yaml": _spec_yaml(f"model: {{coef_init: {bad}}}")},
                      ["fuzz.yaml:", key, "finite"]))
    nan_variant = ("replace", "  gated:\n", "  gated:\n    coef_init: .nan\n")
    cases.append(("nonfinite", "nonfinite-variants-coef", {"variants.yaml": nan_variant},
                  ["variants.yaml:", "coef_init", "finite"]))
    for key, values in RANGES.items():  # out-of-range values
        for value in values:
            body = f"seed: {value}" if key == "seed" else "{}: {{{}: {}}}".format(*key.split("."), value)
            cases.append(("range", f"range-{key}-{value}", {"fuzz.yaml": _spec_yaml(body)}, ["fuzz.yaml:", key]))
    for _ in range(10):  # random far-out values of random ranged fields
        key = rng.choice(sorted(RANGES))
        value = rng.choice(RANGES[key]) * rng.choice([1, 3, 1000]) if key != "seed" else -rng.randint(1, 10 ** 9)
        if key == "seed":
            body = f"seed: {value}"
        elif value == 0:
            continue
        else:
            body = "{}: {{{}: {}}}".format(*key.split("."), value)
        cases.append(("range", f"range-random-{len(cases)}-{key}", {"fuzz.yaml": _spec_yaml(body)},
                      ["fuzz.yaml:", key]))
    kinds = ("spec", "group", "table", "figure", "preset", "shape", "metric", "row", "label")
    for label, bad in BAD_NAMES.items():  # every bad name, in every kind of name
        for kind in kinds:
            what = {"metric": "metric id", "row": "row id", "label": "grid label"}.get(kind, f"{kind} name")
            rule = "characters long" if label.startswith("long") else "invalid"
            expect = ["fuzz.yaml:2" if kind not in ("spec", "label") else "fuzz.yaml:", what, rule]
            cases.append(("name", f"name-{kind}-{label}", {"fuzz.yaml": _names_of_kind(kind, bad)}, expect))
    reg = Registry()
    for kind, taken in (("table", list(reg.tables)), ("figure", list(reg.figures)), ("group", list(reg.groups))):
        for name in taken:  # a spec named like a table, figure or group: it would shadow it
            cases.append(("namespace", f"shadow-spec-{kind}-{name}", {"fuzz.yaml": _names_of_kind("spec", name)},
                          ["fuzz.yaml:", "share one namespace"]))
    for name in rng.sample(sorted(reg.specs), 8):  # a table, figure or group named like a spec
        kind = rng.choice(["table", "figure", "group"])
        cases.append(("namespace", f"shadow-{kind}-spec-{name}", {"fuzz.yaml": _names_of_kind(kind, name)},
                      ["fuzz.yaml:", "share one namespace"]))
    cases.append(("namespace", "shadow-figure-other-table",
                  {"fuzz.yaml": "figures:\n  table1: {title: x, kind: curves, specs: [base-s42], series: [val_loss]}\n"},
                  ["fuzz.yaml:2", "table"]))
    for i in range(6):  # alias bombs
        text, size = _alias_bomb(rng)
        cases.append(("yaml-budget", f"alias-bomb-{i}-{size}", {"fuzz.yaml": text}, ["fuzz.yaml:", "aliases"]))
    cases.append(("yaml-budget", "alias-uses", {"fuzz.yaml": "a: &a x\nb: [" + ", ".join(["*a"] * 1500) + "]\n"},
                  ["fuzz.yaml:", "alias uses"]))
    for depth in sorted(rng.sample(range(limits.MAX_DEPTH + 1, 3000), 5)) + [100_000]:  # deep nesting
        cases.append(("yaml-budget", f"deep-flow-{depth}", {"fuzz.yaml": "groups: " + "[" * depth + "\n"},
                      ["fuzz.yaml:1", "nesting deeper"]))
    for depth in (limits.MAX_DEPTH + 1, 200):
        text = "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v\n"
        cases.append(("yaml-budget", f"deep-block-{depth}", {"fuzz.yaml": text}, ["fuzz.yaml:", "nesting deeper"]))
    cases.append(("yaml-budget", "big-file", {"fuzz.yaml": "# " + "x" * limits.MAX_FILE_BYTES + "\n"},
                  ["fuzz.yaml", "byte limit"]))
    cases.append(("yaml-budget", "int-5000-digits", {"fuzz.yaml": _spec_yaml("train: {steps: " + "9" * 5000 + "}")},
                  ["fuzz.yaml:8", "cannot read the value"]))
    cases.append(("yaml-budget", "int-huge-float-field", {"fuzz.yaml": _spec_yaml(f"train: {{muon_lr: {10 ** 400}}}")},
                  ["fuzz.yaml:8", "too large"]))
    cases.append(("yaml-budget", "not-utf8", {"fuzz.yaml": b"groups: \xff\xfe\n"}, ["fuzz.yaml", "UTF-8"]))
    for i in range(8):  # sweeps over the size limit
        n_axes = rng.randint(2, 8)
        sizes = [rng.randint(5, 25) for _ in range(n_axes)]
        while _prod(sizes) <= limits.MAX_SWEEP_POINTS:
            sizes[rng.randrange(n_axes)] += 10
        labels = [", ".join(f"v{k}: {{train.muon_lr: {0.001 * (k + 1)}}}" for k in range(n)) for n in sizes]
        grid = "".join(f"          a{j}: {{{axis}}}\n" for j, axis in enumerate(labels))
        template = "x-" + "-".join(f"{{a{j}}}" for j in range(n_axes))
        text = (f"groups:\n  fuzz:\n    why: fuzz group\n    sweeps:\n      - name: \"{template}\"\n"
                "        variant: base\n        grid:\n" + grid)
        cases.append(("sweep-size", f"sweep-{'x'.join(map(str, sizes))}", {"fuzz.yaml": text},
                      ["fuzz.yaml:5", "points", "over the limit"]))
    for i, target in enumerate(["../outside.yaml", "../../etc/passwd", "/etc/passwd", "sub/../../x.yaml"]):
        cases.append(("path", f"include-outside-{i}", {"fuzz.yaml": f"include: [{_q(target)}]\n"},
                      ["fuzz.yaml:1", "outside the registry directory"]))
    cases.append(("path", "runs-root-in-file", {"fuzz.yaml": _spec_yaml("placement: {runs_root: /tmp/elsewhere}")},
                  ["fuzz.yaml:", "placement.runs_root", "--runs-dir"]))
    cases.append(("path", "runs-root-in-preset", {"fuzz.yaml": "presets:\n  p9:\n    why: x\n    shape: smoke\n"
                                                               "    placement: {runs_root: /tmp/x}\n"},
                  ["fuzz.yaml:5", "placement.runs_root"]))
    return cases


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


def _spec_yaml(body):
    return ("groups:\n  fuzz:\n    why: fuzz group\n    specs:\n      fuzz-spec:\n        variant: e-exoformer\n"
            f"        seed: 5\n        {body}\n")


def _override_cases():
    """`--set` values through `show fuzz-spec`: (class, id, overrides, expect)."""
    rng = random.Random(FUZZ_SEED + 1)
    cases = []
    for key in FLOAT_FIELDS:
        bad = rng.choice([".nan", ".inf", "-.inf", ".NaN", "-.Inf"])
        cases.append(("set-nonfinite", f"set-{key}-{bad}", [f"{key}={bad}"], ["--set", key, "finite"]))
    for key, values in RANGES.items():
        cases.append(("set-range", f"set-range-{key}", [f"{key}={rng.choice(values)}"], ["--set", key]))
    cases += [
        ("set-misc", "set-runs-root", ["placement.runs_root=/tmp/elsewhere"], ["placement.runs_root", "--runs-dir"]),
        ("set-misc", "set-deep", ["model.mix_paths=" + "[" * 100_000], ["--set model.mix_paths", "nesting deeper"]),
        ("set-misc", "set-deep-2000", ["model.mix_paths=" + "[" * 2000 + "]" * 2000], ["--set", "nesting deeper"]),
        ("set-misc", "set-bomb", ["model.mix_paths=" + "[&a [q,q,q,q,q,q,q,q,q], " + ", ".join(
            f"&b{i} [" + ", ".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 9) + "]" for i in range(7)) + "]"],
         ["--set", "aliases"]),
        ("set-misc", "set-seed-neg", ["seed=-1"], ["--set seed", "2**32"]),
        ("set-misc", "set-seed-big", [f"seed={2 ** 32}"], ["--set seed", "2**32"]),
        ("set-misc", "set-int-5000-digits", ["train.steps=" + "7" * 5000],
         ["--set train.steps", "cannot read the value"]),
        ("set-misc", "set-int-64-bits", [f"train.steps={2 ** 64}"], ["--set train.steps", "64 bits"]),
        ("set-misc", "set-float-overflow", ["train.muon_lr=1e400"], ["--set train.muon_lr", "finite"]),
        ("set-misc", "set-bad-date", ["train.steps=2026-13-45"], ["--set train.steps", "cannot read the value"]),
    ]
    return cases


LIMIT_CASES = _limit_cases()
OVERRIDE_CASES = _override_cases()
LIMIT_CLASSES = sorted({c[0] for c in LIMIT_CASES} | {c[0] for c in OVERRIDE_CASES})


def test_the_limit_classes_add_at_least_200_cases():
    per_class = {cls: sum(c[0] == cls for c in [*LIMIT_CASES, *OVERRIDE_CASES]) for cls in LIMIT_CLASSES}
    assert set(per_class) == {"nonfinite", "range", "name", "namespace", "yaml-budget", "sweep-size", "path",
                              "set-nonfinite", "set-range", "set-misc"}, per_class
    assert all(n >= 3 for n in per_class.values()), per_class
    assert len(LIMIT_CASES) + len(OVERRIDE_CASES) >= 200, per_class
    assert len({c[1] for c in LIMIT_CASES} | {c[1] for c in OVERRIDE_CASES}) == len(LIMIT_CASES) + len(OVERRIDE_CASES)


@pytest.mark.parametrize("cls,case_id,files,expect", LIMIT_CASES, ids=[c[1] for c in LIMIT_CASES])
def test_input_limit_mutation_gives_one_line_error(workspace, capsys, cls, case_id, files, expect):
    reg, reported = workspace
    originals = {name: (reg / name).read_bytes() if (reg / name).exists() else None for name in files}
    try:
        for name, text in files.items():
            if isinstance(text, tuple):  # ("replace", old, new) on the copied file
                _, old, new = text
                current = originals[name].decode()
                assert old in current, old
                text = current.replace(old, new, 1)
            (reg / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        code, _, err = _validate(capsys, reg, reported)
    finally:
        for name, data in originals.items():
            if data is None:
                (reg / name).unlink()
            else:
                (reg / name).write_bytes(data)
    _check(code, err, expect, case_id)


@pytest.mark.parametrize("cls,case_id,overrides,expect", OVERRIDE_CASES, ids=[c[1] for c in OVERRIDE_CASES])
def test_bad_override_gives_one_line_error(workspace, capsys, cls, case_id, overrides, expect):
    reg, _ = workspace
    argv = ["show", "fuzz-spec", "--registry", str(reg)]
    for text in overrides:
        argv += ["--set", text]
    code = main(argv)
    _, err = capsys.readouterr()
    _check(code, err, expect, case_id)
