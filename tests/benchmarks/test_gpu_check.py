"""benchmarks/gpu_check.py: the --cpu run prints every row and writes its JSON; a failing check is a row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402

ROW_NAMES = [name for name, _ in gpu_check.checks()]


def test_the_check_list_covers_every_required_measurement():
    text = "\n".join(ROW_NAMES)
    for needed in ("flex doc mask vs dense SDPA", "train MFU gated", "train MFU dynamic-e-exoformer",
                   "train peak memory gated", "train step time dynamic-e-exoformer / gated",
                   "30 bf16 steps eager vs compiled", "eval requests/s, batch 1", "eval peak memory, batched",
                   "eval peak memory lean / full logits", "process group init",
                   "resume official-pure-bf16", "eval on the job's device", "train step FlexAttention / sdpa",
                   "Muon shared by 2 ranks vs replicated", "loss peak memory chunked / unchunked",
                   "bf16 scoring batch 1 vs the author's loglikelihood", "bf16 scoring batched vs batch 1",
                   "bf16 scoring CUDA vs CPU", "Polar Express bf16 vs the official kernels' rounding"):
        assert needed in text
    assert all(f"compiled vs eager loss: {v}" in ROW_NAMES for v in gpu_check.FAMILIES.values())
    assert len(set(ROW_NAMES)) == len(ROW_NAMES)


def test_polar_express_row_on_the_cpu_is_the_transcription_bit_for_bit():
    import torch

    ctx = gpu_check.Context(gpu_check.CPU_SCALE, torch.device("cpu"), "CPU", None)
    row = gpu_check.row_polar_express(ctx)
    assert row.value == 0.0 and row.ok is True and "rounding after every bf16 op" in row.notes


def test_scoring_decisions_follow_lm_evals_first_maximum_rule():
    questions = [[([1], [2]), ([1], [3, 4]), ([1], [5])], [([1], [2]), ([1], [2, 3])]]
    lls = [-2.0, -3.0, -2.0, -4.0, -4.0]
    assert gpu_check.decisions(questions, lls) == [(0, 1), (0, 1)]


def test_document_mask_batches_give_each_row_its_own_boundaries():
    import torch

    cfg = gpu_check.config("gated", {"shape": "tiny", "seq_len": 64})
    _, _, starts = gpu_check.batch_for(cfg, 4, 64, torch.device("cpu"))
    assert starts[:, 0].all() and len({tuple(row.nonzero().flatten().tolist()) for row in starts}) > 1


@pytest.mark.slow
def test_cpu_run_prints_every_row_marked_cpu_and_writes_the_json(tmp_path):
    out = tmp_path / "check.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--cpu", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    for name in ROW_NAMES:
        printed = [line for line in lines if line.startswith(name + "  ")]
        assert len(printed) == 1, name
        assert "  CPU  " in printed[0] and "CPU toy scale" in printed[0] and "error:" not in printed[0]
    data = json.loads(out.read_text())
    assert data["tool"] == "benchmarks/gpu_check.py" and data["cpu_mode"] is True and data["complete"] is True
    assert data["mfu"] == {} and data["peak_bf16_tflops"] is None  # no MFU is claimed for a CPU
    assert [r["name"] for r in data["rows"]] == ROW_NAMES
    assert all(r["device"] == "CPU" and r["ok"] is not False for r in data["rows"])
    measured = {r["name"]: r["value"] for r in data["rows"]}
    assert measured["eval requests/s, batch 1"] > 0 and measured["train tokens/s gated"] > 0
    assert measured["train MFU gated"] is None  # unknown peak, not guessed
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, no temporary left


def test_a_failing_check_is_an_error_row_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    def broken(ctx):
        raise RuntimeError("flex exploded")

    monkeypatch.setattr(gpu_check, "flex_against_sdpa", broken)
    out = tmp_path / "partial.json"
    code = gpu_check.main(["--cpu", "--out", str(out), "--only", "flex", "process group"])
    printed = capsys.readouterr().out
    assert code == 1
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {n for n in ROW_NAMES if "flex" in n or "process group" in n}
    flex = [r for n, r in rows.items() if "flex" in n and not n.startswith("model loss")]
    assert len(flex) == 2 and all(r["ok"] is False and "RuntimeError: flex exploded" in r["notes"] for r in flex)
    assert rows["model loss, attention flex vs sdpa"]["ok"] is True  # our model's own flex path, not the kernel check
    assert rows[next(n for n in rows if "process group" in n)]["ok"] is True
    assert "2 failed" in printed


@pytest.mark.parametrize("name, peak", [("NVIDIA H200", 989.0), ("NVIDIA H100 80GB HBM3", 989.0),
                                        ("NVIDIA H100 PCIe", 756.0), ("NVIDIA A100-SXM4-80GB", 312.0),
                                        ("Tesla T4", None)])
def test_peak_table_matches_device_names_and_leaves_unknown_devices_unknown(name, peak):
    assert gpu_check.peak_tflops(name) == peak


def test_checks_past_the_time_budget_are_skipped_rows_not_failures(tmp_path, capsys):
    out = tmp_path / "budget.json"
    assert gpu_check.main(["--cpu", "--out", str(out), "--only", "process group", "--budget-s", "0"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] is None and row["value"] is None and "skipped: past the 0 s budget" in row["notes"]
    assert "skipped" in capsys.readouterr().out


def test_a_shared_measurement_that_fails_is_reported_by_each_row_that_needs_it():
    ctx = gpu_check.Context(gpu_check.CPU_SCALE, gpu_check.torch.device("cpu"), "CPU", None)
    calls = []

    def failing():
        calls.append(1)
        raise MemoryError("out of memory at step 0")

    rows = [gpu_check.run_check(ctx, f"row {i}", lambda c: c.row(c.once("shared", failing), "x")) for i in range(2)]
    assert len(calls) == 1  # computed once
    for i, row in enumerate(rows):
        assert row.name == f"row {i}" and row.ok is False and row.value is None
        assert "error: MemoryError: out of memory at step 0 (test_gpu_check.py:" in row.notes


def test_memory_model_rows_write_the_measured_ratio_that_preflight_reads(tmp_path, monkeypatch):
    from exoformer.budget.cost import read_memory_ratio

    ctx = gpu_check.Context(gpu_check.GPU_SCALE, gpu_check.torch.device("cuda", 0), "NVIDIA H100 80GB HBM3", 989.0)
    for variant in gpu_check.STEP_VARIANTS:  # a measured step as train_step records it (no GPU touched here)
        estimated = gpu_check.step_memory_estimate(ctx, variant).peak_tensors
        ctx.memo[("step", variant)] = (True, {"peak": int(1.1 * estimated), "mfu": None})
    rows = {name: gpu_check.run_check(ctx, name, check) for name, check in gpu_check.checks()
            if "memory measured / estimate" in name or "memory estimate" in name}
    assert len(rows) == 2 * len(gpu_check.STEP_VARIANTS)
    ratio = rows["train peak memory measured / estimate gated"]
    assert ratio.value == pytest.approx(1.1, rel=1e-3) and ratio.ok is True
    out = tmp_path / "gpu_check.json"
    out.write_text(json.dumps(gpu_check.report(ctx, list(rows.values()), complete=True)))
    ratios, where = read_memory_ratio(out)
    assert ratios == {v: pytest.approx(1.1, rel=1e-3) for v in gpu_check.STEP_VARIANTS}
    assert where.startswith("NVIDIA H100 80GB HBM3 ")


def test_memory_rows_on_cpu_claim_no_ratio(tmp_path):
    out = tmp_path / "cpu.json"
    assert gpu_check.main(["--cpu", "--out", str(out), "--only", "train peak memory"]) == 0
    data = json.loads(out.read_text())
    assert data["memory_ratio"] == {}
    rows = {r["name"]: r for r in data["rows"]}
    assert rows["train peak memory estimate gated"]["value"] > 0
    assert rows["train peak memory measured / estimate gated"]["value"] is None


def test_gpu_train_step_rows_measure_the_configuration_plan_prices():
    """On a GPU the step rows run the 450m preset's spec as the training loop runs it: the model at its true shape
    with its attention kernel (flex), official-pure-bf16, compiled; the memory row estimates that same step."""
    import torch

    from exoformer.budget.cost import training_precision
    from exoformer.model.config import resolve_attention
    from exoformer.registry.registry import Registry

    ctx = gpu_check.Context(gpu_check.GPU_SCALE, torch.device("cuda"), "H100", 989.0)
    for variant in gpu_check.STEP_VARIANTS:
        priced = Registry().resolve(f"{variant}-s42", preset="450m")
        step = gpu_check.paper_step(ctx, variant)
        assert step.model == priced.model and step.train.micro_batch_seqs == priced.train.micro_batch_seqs == 16
        assert gpu_check.step_precision(ctx, variant) == training_precision(priced, "cuda") == "official-pure-bf16"
        assert gpu_check.step_compiled(ctx, variant) and priced.train.compile
        assert resolve_attention(step.model.attention, ctx.device.type) == "flex"
        estimate = gpu_check.step_memory_estimate(ctx, variant)
        assert 20e9 < estimate.peak_tensors < 80e9  # the 450M step at micro-batch 16 x 2048 (docs/cluster.md preflight table)
