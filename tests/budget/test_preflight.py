"""`reproduce.py preflight` and the same checks in `run --backend slurm`: fits, refusals in one line, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.registry.registry import REPO_ROOT

PROFILES = REPO_ROOT / "slurm" / "profiles"


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """A copy of slurm/profiles/ that a test may edit, used through $EXOFORMER_PROFILES."""
    copy = tmp_path / "profiles"
    shutil.copytree(PROFILES, copy)
    monkeypatch.setenv("EXOFORMER_PROFILES", str(copy))
    monkeypatch.setenv("EXOFORMER_GPU_CHECK", str(tmp_path / "no-gpu-check.json"))
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_table1_fits_on_h100_with_a_row_per_spec(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("EXOFORMER_GPU_CHECK", str(tmp_path / "none.json"))
    assert main(["preflight", "table1", "--profile", "h100"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.endswith(" yes")]
    assert [r.split()[0] for r in rows] == ["base-s42", "gated-s42", "resformer-s42", "gated-resformer-s42",
                                            "e-nuresformer-s42", "e-exoformer-s42", "h-exoformer-s42",
                                            "s-exoformer-s42", "dynamic-e-exoformer-s42"]
    assert all("matches" in r and "80 GB" in r and "16x1" in r for r in rows)


def test_json_reports_parameters_flops_and_memory_parts(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("EXOFORMER_GPU_CHECK", str(tmp_path / "none.json"))
    assert main(["preflight", "gated-s42", "--profile", "h100", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["specs"][0]
    assert row["params"] == 437_582_464 and row["official_params"] == 452_526_720 and row["official_params_ok"]
    assert row["flops_per_token"] == pytest.approx(row["flops_per_token_cost_model"], rel=1e-3)
    parts = row["memory_parts_gb"]
    assert row["memory_peak_phase"] == "loss backward"  # every activation alive, the logits buffers of the loss
    at_loss = ("weights", "optimizer", "ddp_buckets", "activations", "logits", "margin", "context")
    assert row["memory_gb"] == pytest.approx(sum(parts[k] for k in at_loss), rel=1e-3)
    assert row["fits"] is True and row["memory_limit_gb"] == 80 and row["ranks"] == 8


def test_16_gb_gpus_refuse_each_spec_naming_the_micro_batch(profiles, capsys):
    edit(profiles / "h100.yaml", "memory_gb: 80", "memory_gb: 16")
    assert main(["preflight", "table1", "--profile", "h100"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 9  # one line per spec of table1
    assert err[0].startswith("error: base-s42: needs ") and "more than the 16 GB" in err[0]
    assert "(fix: --set train.micro_batch_seqs=2: 8 accumulation steps keep the global batch of 262,144" in err[0]


def test_run_on_slurm_refuses_the_same_before_submitting(profiles, capsys, tmp_path):
    edit(profiles / "h100.yaml", "memory_gb: 80", "memory_gb: 16")
    runs = tmp_path / "runs"
    code = main(["run", "table1", "--backend", "slurm", "--profile", "h100", "--runs-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: base-s42: needs ") and "--set train.micro_batch_seqs=2" in err
    assert not runs.exists()  # refused before anything was written or submitted


def test_the_measured_memory_ratio_scales_the_estimate(profiles, capsys, tmp_path, monkeypatch):
    assert main(["preflight", "gated-s42", "--profile", "h100", "--json"]) == 0
    derived = json.loads(capsys.readouterr().out)["specs"][0]
    check = tmp_path / "gpu_check.json"
    check.write_text(json.dumps({"tool": "benchmarks/gpu_check.py", "cpu_mode": False, "device": "NVIDIA H100",
                                 "date": "2026-12-01T00:00:00Z", "memory_ratio": {"gated": 0.5}}))
    monkeypatch.setenv("EXOFORMER_GPU_CHECK", str(check))
    assert main(["preflight", "gated-s42", "--profile", "h100", "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)["specs"][0]
    assert measured["memory_gb"] < 0.55 * derived["memory_gb"]
    assert "measured by benchmarks/gpu_check.py on NVIDIA H100 2026-12-01" in measured["memory_source"]
    assert main(["plan", "gated-s42", "--profile", "h100", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["specs"][0]
    assert planned["memory_gb"] == pytest.approx(measured["memory_gb"], rel=1e-3)


def test_a_time_limit_shorter_than_a_checkpoint_interval_is_refused(profiles, capsys):
    assert main(["preflight", "gated-s42", "--profile", "h100", "--set", "profile.slurm.time_min=4"]) == 2
    err = capsys.readouterr().err
    assert "one checkpoint interval (1000 steps" in err and "120 s requeue signal delay" in err
    assert "slurm.time_min=4" in err and "(fix: --set train.checkpoint_every=" in err


def test_ranks_that_do_not_divide_the_global_batch_are_refused(profiles, capsys):
    assert main(["preflight", "gated-s42", "--profile", "h100", "--set", "profile.slurm.gpus_per_node=3"]) == 2
    err = capsys.readouterr().err
    assert "gated-s42 on " in err and "h100.yaml: batch_tokens=262,144 is not a multiple of" in err
    assert "x 16 x 3" in err and "(fix: " in err


@pytest.mark.parametrize("old, new, expected", [
    ("  memory_gb: 80", "", "h100.yaml: gpu.memory_gb: has no gpu.memory_gb"),
    ("memory_gb: 80", "memory_gb: 0", "h100.yaml: gpu.memory_gb: must be > 0, got 0"),
    ("memory_gb: 80", "memory_gb: -8", "h100.yaml: gpu.memory_gb: must be > 0, got -8"),
])
def test_bad_gpu_memory_is_one_line_naming_file_field_and_fix(profiles, capsys, old, new, expected):
    edit(profiles / "h100.yaml", old, new)
    assert main(["preflight", "table1", "--profile", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and "(fix: " in err and "memory_gb: 80" in err


def test_a_micro_batch_that_does_not_divide_the_global_batch_names_the_field(profiles, capsys):
    # 128 sequences per step: 32 divide them on one rank, not over the profile's 8 ranks
    assert main(["preflight", "gated-s42", "--profile", "h100", "--set", "train.micro_batch_seqs=32"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "h100.yaml: batch_tokens=262,144 is not a multiple of" in err
    assert "train.micro_batch_seqs x ranks = 2048 x 32 x 8" in err and "(fix: --set train.micro_batch_seqs=16)" in err
    assert main(["preflight", "gated-s42", "--profile", "h100", "--set", "train.micro_batch_seqs=3"]) == 2
    err = capsys.readouterr().err  # refused when the spec is resolved, before any profile is read
    assert err.count("\n") == 1 and "train.micro_batch_seqs" in err and "(fix: " in err


def test_a_parameter_count_that_disagrees_is_a_problem_naming_both(monkeypatch, tmp_path):
    """The built model's count against the closed form, and at the author's vocabulary against the official count."""
    from exoformer.budget import preflight as pf
    from exoformer.model.config import ModelConfig
    from exoformer.registry.profiles import load_profile
    from exoformer.registry.registry import Registry

    monkeypatch.setenv("EXOFORMER_GPU_CHECK", str(tmp_path / "none.json"))
    monkeypatch.setattr(pf, "official_count", lambda spec: 452_526_721)
    monkeypatch.setattr(ModelConfig, "num_parameters", lambda self: 1)
    row = pf.check_spec(Registry().resolve("gated-s42"), load_profile("h100"))
    problems = [str(p) for p in row.problems]
    assert row.official_ok is False and not row.ok and "DIFFERS" in pf.format_table([row])
    assert any("452,526,720 parameters" in p and "says 452,526,721" in p for p in problems)
    assert any("437,582,464 parameters, the closed form 1" in p for p in problems)
