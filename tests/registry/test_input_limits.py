"""Input limits (docs/input-limits.md, exoformer/limits.py): each limit refuses bad input with exit 2 and one
`error:` line, never a hang, a crash, a traceback or a silently different result; good input at the edge of
each limit still passes. The dangerous inputs run the real CLI in a subprocess under a memory cap and a timeout.
"""

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exoformer import limits
from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.registry import DEFAULT_REGISTRY, Registry
from exoformer.registry.reported import DEFAULT_REPORTED
from exoformer.registry.spec import parse_override
from exoformer.model.variants import variant_config
from exoformer.yaml_lines import load_yaml_text

REPO = Path(__file__).resolve().parents[2]
MEMORY_CAP = 2 << 30  # 2 GiB of address space for the CLI under test
FZ = "groups:\n  fz:\n    why: limits\n"


def _registry(tmp_path, text, name="fz.yaml"):
    reg = tmp_path / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, reg)
    (reg / "registry.yaml").write_text((reg / "registry.yaml").read_text().rstrip() + f"\n  - {name}\n")
    (reg / name).write_text(text)
    return reg


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _cli(*argv, registry=None, timeout=60):
    """reproduce.py in a subprocess under a 2 GiB address-space cap; a hang fails by the timeout."""
    env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    if registry is not None:
        env["EXOFORMER_REGISTRY"] = str(registry)
    return subprocess.run([sys.executable, "reproduce.py", *argv], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=timeout, preexec_fn=_capped)


def _one_error_line(res, *pieces):
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    for piece in pieces:
        assert piece in res.stderr, (piece, res.stderr)


def _in_process(capsys, *argv):
    code = main(list(argv))
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (code, err)
    return err


# ------------------------------------------------------------------ machine-exhausting files

def _bomb_levels(width=9, depth=9):
    """Anchors a, b, c, ...: each a list of `width` aliases of the previous one (width**depth values in all)."""
    names = "abcdefghijklmnop"[:depth]
    levels = ["&a [" + ", ".join(["x"] * width) + "]"]
    levels += [f"&{n} [" + ", ".join([f"*{p}"] * width) + "]" for p, n in zip(names, names[1:])]
    return levels


BOMB = "".join(f"{chr(97 + i)}: {level}\n" for i, level in enumerate(_bomb_levels()))
"""A bare alias bomb: 9**9 (387 million) values once expanded."""
BOMB_IN_SPEC = FZ + "    specs:\n      fz-a:\n        variant: base\n        note: [" + ", ".join(_bomb_levels()) + "]\n"
"""The same bomb where the loader must read it: a spec's note (a string field; the error message would print it)."""


@pytest.mark.parametrize("verb", [["validate"], ["list"], ["plan", "table1"]])
def test_an_alias_bomb_is_refused_under_a_memory_cap(tmp_path, verb):
    assert len(BOMB_IN_SPEC) < 800
    reg = _registry(tmp_path, BOMB_IN_SPEC)
    _one_error_line(_cli(*verb, "--runs-dir", str(tmp_path / "runs"), registry=reg) if verb[0] == "plan"
                    else _cli(*verb, registry=reg), "fz.yaml:", "aliases are expanded")


def test_a_huge_sweep_grid_is_refused_before_expanding(tmp_path):
    grid = "".join(f"          a{j}: {{" + ", ".join(f"v{k}: {{train.muon_lr: 0.0{k + 1}}}" for k in range(20)) + "}\n"
                   for j in range(8))  # 20**8 = 2.56e10 points
    template = "x-" + "-".join(f"{{a{j}}}" for j in range(8))
    text = FZ + f"    sweeps:\n      - name: \"{template}\"\n        variant: base\n        grid:\n" + grid
    reg = _registry(tmp_path, text)
    for verb in (["validate"], ["list"]):
        _one_error_line(_cli(*verb, registry=reg), "fz.yaml:5", "25600000000 points", str(limits.MAX_SWEEP_POINTS))


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deep_nesting_is_refused_without_a_crash(tmp_path, depth):
    reg = _registry(tmp_path, "groups: " + "[" * depth + "\n")
    _one_error_line(_cli("validate", registry=reg), "fz.yaml:1", f"deeper than {limits.MAX_DEPTH}")


def test_nesting_at_the_depth_limit_still_loads():
    text = "[" * (limits.MAX_DEPTH - 1) + "]" * (limits.MAX_DEPTH - 1)
    value = load_yaml_text(text, where="t")
    for _ in range(limits.MAX_DEPTH - 2):
        value = value[0]
    assert value == []
    with pytest.raises(UserError, match="deeper than"):
        load_yaml_text("[" * (limits.MAX_DEPTH + 1) + "]" * (limits.MAX_DEPTH + 1), where="t")


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "."])
def test_reported_that_is_not_a_regular_file_is_refused(path):
    _one_error_line(_cli("validate", "--reported", path, timeout=60), "not a regular file")


def test_a_fifo_as_reported_does_not_hang(tmp_path):
    fifo = tmp_path / "reported.yaml"
    os.mkfifo(fifo)
    _one_error_line(_cli("validate", "--reported", str(fifo), timeout=60), "not a regular file")


def test_a_file_over_the_size_limit_is_refused(tmp_path):
    reg = _registry(tmp_path, "# " + "x" * limits.MAX_FILE_BYTES + "\n")
    _one_error_line(_cli("validate", registry=reg), "fz.yaml", "byte limit")


# ------------------------------------------------------------------ numbers

def test_nan_through_set_is_a_one_line_error(capsys):
    err = _in_process(capsys, "show", "e-exoformer-s42", "--set", "train.muon_lr=.nan")
    assert "--set train.muon_lr" in err and "finite" in err
    err = _in_process(capsys, "plan", "e-exoformer-s42", "--set", "model.rope_theta=.inf")
    assert "--set model.rope_theta" in err and "finite" in err


def test_nan_in_the_variants_table_names_its_line(tmp_path, capsys):
    reg = _registry(tmp_path, "{}\n")
    text = (reg / "variants.yaml").read_text().replace("  gated:\n", "  gated:\n    coef_init: .nan\n", 1)
    (reg / "variants.yaml").write_text(text)
    line = text.splitlines().index("    coef_init: .nan") + 1
    err = _in_process(capsys, "validate", "--registry", str(reg))
    assert f"variants.yaml:{line}" in err and "coef_init" in err and "finite" in err


def test_nan_in_reported_numbers_is_refused(tmp_path, capsys):
    reported = tmp_path / "reported.yaml"
    text = DEFAULT_REPORTED.read_text()
    old = "val_ppl: {value: 14.79, source: WEB, version: v4}"
    assert old in text
    reported.write_text(text.replace(old, "val_ppl: {value: .nan, source: WEB, version: v4}", 1))
    err = _in_process(capsys, "validate", "--reported", str(reported))
    assert "reported.yaml:" in err and "finite" in err


@pytest.mark.parametrize("body,field", [
    ("seed: -1", "seed"), (f"seed: {2 ** 32}", "seed"), ("train: {muon_lr: -0.01}", "train.muon_lr"),
    ("train: {grad_clip: -1.0}", "train.grad_clip"), ("train: {adam_eps: -1e-8}", "train.adam_eps"),
    ("train: {adam_eps: 0}", "train.adam_eps"), ("train: {warmup_steps: -5}", "train.warmup_steps"),
    ("train: {val_every: -1}", "train.val_every"), ("train: {adam_beta2: 5}", "train.adam_beta2"),
    ("train: {adam_beta1: 1.0}", "train.adam_beta1"), ("model: {coef_init: .inf}", "model.coef_init"),
])
def test_out_of_range_values_fail_validate(tmp_path, capsys, body, field):
    spec = f"    specs:\n      fz-a:\n        variant: e-exoformer\n        seed: 7\n        {body}\n"
    reg = _registry(tmp_path, FZ + spec.replace("        seed: 7\n        seed:", "        seed:"))
    err = _in_process(capsys, "validate", "--registry", str(reg))
    assert "fz.yaml:" in err and field in err


def test_values_at_the_edges_of_the_ranges_are_accepted():
    reg = Registry()
    edge = ["seed=0", "train.warmup_steps=0", "train.val_every=0", "train.muon_momentum_steps=0",
            "train.adam_beta1=0", "train.adam_weight_decay=0", "train.z_loss=0", "train.adam_eps=1e-30"]
    spec = reg.resolve("e-exoformer-s42", overrides=edge)
    assert (spec.seed, spec.train.warmup_steps, spec.train.val_every, spec.train.adam_eps) == (0, 0, 0, 1e-30)
    assert reg.resolve("e-exoformer-s42", overrides=[f"seed={2 ** 32 - 1}"]).seed == 2 ** 32 - 1


# ------------------------------------------------------------------ names and paths

def test_a_name_with_a_trailing_newline_is_refused(tmp_path, capsys):
    reg = _registry(tmp_path, FZ + "    specs:\n      \"fz-nl\\n\": {variant: base, seed: 9}\n")
    err = _in_process(capsys, "validate", "--registry", str(reg))
    assert "fz.yaml:5" in err and "invalid spec name" in err
    assert limits.NAME_RE.match("fz-nl\n") is None and limits.NAME_RE.match("fz-nl")


def test_a_spec_named_like_a_table_is_refused(tmp_path, capsys):
    reg = _registry(tmp_path, FZ + "    specs:\n      table1: {variant: base, seed: 9}\n")
    for verb in (["validate"], ["plan", "table1"], ["list"]):
        err = _in_process(capsys, *verb, "--registry", str(reg))
        assert "fz.yaml:5" in err and "'table1'" in err and "share one namespace" in err


def test_a_300_character_name_fails_validate_not_list(tmp_path, capsys):
    reg = _registry(tmp_path, FZ + "    specs:\n      " + "a" * 300 + ": {variant: base, seed: 9}\n")
    for verb in ("validate", "list"):
        err = _in_process(capsys, verb, "--registry", str(reg))
        assert "fz.yaml:5" in err and "300 characters" in err and str(limits.MAX_NAME_LEN) in err


def test_a_name_of_the_maximum_length_works(tmp_path):
    name = "a" * limits.MAX_NAME_LEN
    reg = Registry(_registry(tmp_path, FZ + f"    specs:\n      {name}: {{variant: base, seed: 9}}\n"))
    assert reg.resolve(name).name == name


def test_runs_root_cannot_be_set_from_a_file_or_set(tmp_path, capsys):
    err = _in_process(capsys, "plan", "base-s42", "--set", "placement.runs_root=/tmp/elsewhere")
    assert "placement.runs_root" in err and "--runs-dir" in err and "EXOFORMER_RUNS_DIR" in err
    reg = _registry(tmp_path, FZ + "    specs:\n      fz-a:\n        variant: base\n        seed: 9\n"
                    "        placement: {runs_root: /tmp/elsewhere}\n")
    err = _in_process(capsys, "validate", "--registry", str(reg))
    assert "fz.yaml:8" in err and "placement.runs_root" in err and "--runs-dir" in err


def test_include_outside_the_registry_is_refused(tmp_path, capsys):
    (tmp_path / "outside.yaml").write_text("groups: {}\n")
    reg = _registry(tmp_path, "include: [../outside.yaml]\n")
    err = _in_process(capsys, "validate", "--registry", str(reg))
    assert "fz.yaml:1" in err and "outside the registry directory" in err


@pytest.mark.parametrize("profile", ["../../experiments/presets", "../profiles/h100", "/etc/passwd", "h100/.."])
def test_profile_is_a_name_not_a_path(capsys, profile):
    err = _in_process(capsys, "plan", "base-s42", "--profile", profile)
    assert "--profile" in err and "invalid profile name" in err


def test_an_empty_registry_or_reported_is_refused(capsys, monkeypatch):
    err = _in_process(capsys, "validate", "--registry", "")
    assert "--registry" in err and "empty" in err
    err = _in_process(capsys, "validate", "--reported", "")
    assert "--reported" in err and "empty" in err
    for env, argv in (("EXOFORMER_REPORTED", ["validate"]), ("EXOFORMER_PROFILES", ["plan", "base-s42"]),
                      ("EXOFORMER_REGISTRY", ["list"])):
        monkeypatch.setenv(env, "")
        err = _in_process(capsys, *argv)
        assert f"${env}" in err and "empty" in err


def test_merge_keys_work_and_duplicate_keys_stay_errors(tmp_path, capsys):
    text = (FZ + "    defaults: &common\n      variant: e-exoformer\n      train: {muon_lr: 0.02}\n"
            "    specs:\n      fz-a:\n        <<: *common\n        seed: 9\n"
            "      fz-b:\n        <<: *common\n        seed: 10\n        variant: base\n")
    reg = Registry(_registry(tmp_path, text))
    a, b = reg.resolve("fz-a"), reg.resolve("fz-b")
    assert (a.variant, a.seed, a.train.muon_lr) == ("e-exoformer", 9, 0.02)
    assert (b.variant, b.seed, b.train.muon_lr) == ("base", 10, 0.02)  # the mapping's own key wins over <<
    merged = load_yaml_text("base: &b {x: 1, y: 2}\nmore: &m {z: 3}\nc:\n  <<: [*b, *m]\n  y: 5\n", where="t")
    assert merged["c"] == {"x": 1, "y": 5, "z": 3}
    with pytest.raises(UserError, match=r"t:3: duplicate key 'x' \(first at line 2\)"):
        load_yaml_text("c:\n  x: 1\n  x: 2\n", where="t")
    with pytest.raises(UserError, match="duplicate key"):
        load_yaml_text("base: &b {x: 1}\nc:\n  <<: *b\n  y: 1\n  y: 2\n", where="t")


def test_an_override_value_goes_through_the_limited_loader():
    with pytest.raises(UserError, match="deeper than"):
        parse_override("model.mix_paths=" + "[" * 100_000)
    assert parse_override("model.mix_paths=[q, k]") == ("model.mix_paths", ["q", "k"])


# ------------------------------------------------------------------ variants.yaml is registry data

def test_a_registry_brings_its_own_variants(tmp_path):
    reg_dir = _registry(tmp_path, FZ + "    specs:\n      fz-own: {variant: fz-variant, seed: 9}\n")
    text = (reg_dir / "variants.yaml").read_text().replace(
        "variants:\n", "variants:\n  fz-variant:\n    description: only here\n    gated: true\n"
                        "    coef_init: 0.25\n", 1)
    (reg_dir / "variants.yaml").write_text(text)
    spec = Registry(reg_dir).resolve("fz-own")
    got = (spec.variant, spec.model.gated, spec.model.coef_init, spec.shape)
    assert got == ("fz-variant", True, 0.25, "450m-gated")
    with pytest.raises(UserError, match="fz-variant"):
        variant_config("fz-variant")  # the repository's table does not have it
    assert variant_config("e-exoformer", "tiny").n_layer == 2  # code without a registry keeps working


def test_the_450m_alias_is_defined_once_in_the_variants_table(tmp_path):
    assert "450m-ungated" not in (DEFAULT_REGISTRY / "presets.yaml").read_text()
    reg = Registry()
    assert reg.presets["450m"].shape == "450m"
    assert reg.variants.aliases["450m"] == ("450m-gated", "450m-ungated")
    assert reg.resolve("base-s42").shape == "450m-ungated" and reg.resolve("gated-s42").shape == "450m-gated"
    reg_dir = _registry(tmp_path, "{}\n")
    text = (reg_dir / "variants.yaml").read_text()
    (reg_dir / "variants.yaml").write_text(text.replace("ungated: 450m-ungated}", "ungated: 1b-ungated}"))
    assert Registry(reg_dir).resolve("base-s42").shape == "1b-ungated"  # changing the one definition moves every spec


def test_a_registry_without_variants_is_refused(tmp_path):
    reg_dir = _registry(tmp_path, "{}\n")
    (reg_dir / "variants.yaml").unlink()
    with pytest.raises(UserError, match="no variants.yaml"):
        Registry(reg_dir)


def test_the_limits_hold_without_libyaml(monkeypatch):
    """A PyYAML built without libyaml composes through the same budgets (a separate copy of the module)."""
    import importlib.util

    import exoformer.yaml_lines as shipped

    monkeypatch.setitem(sys.modules, "yaml._yaml", None)  # `from yaml._yaml import ...` now raises ImportError
    spec = importlib.util.spec_from_file_location("yaml_lines_pure", shipped.__file__)
    pure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pure)
    assert pure._EventSource.__name__ == "_PyEvents"
    assert pure.load_yaml_text("b: &b {x: 1}\nc:\n  <<: *b\n  y: 2\n", where="t")["c"] == {"x": 1, "y": 2}
    bad = (("[" * 100_000, "deeper than"), (BOMB, "aliases are expanded"), ("a: 1\na: 2\n", "duplicate"))
    for text, message in bad:
        with pytest.raises(UserError, match=message):
            pure.load_yaml_text(text, where="t")
