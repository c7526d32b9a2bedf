"""The cost model's MFU: assumed 40%, replaced by a GPU check's measurement, never by a malformed one."""

from __future__ import annotations

import json

import pytest

from exoformer.budget.cost import ASSUMED_MFU, estimate, read_measurement, training_flops
from exoformer.registry.profiles import load_profile
from exoformer.registry.registry import Registry


@pytest.fixture(scope="module")
def specs():
    reg = Registry()
    return {"gated": reg.resolve("gated-s42"), "dynamic": reg.resolve("dynamic-e-exoformer-s42"),
            "base": reg.resolve("base-s42")}


def check_json(**changes) -> dict:
    data = {"format": 1, "tool": "benchmarks/gpu_check.py", "cpu_mode": False, "device": "NVIDIA H200",
            "date": "2026-12-01T11:00:00Z", "peak_bf16_tflops": 989.0,
            "mfu": {"gated": 0.31, "dynamic-e-exoformer": 0.28}, "rows": []}
    data.update(changes)
    return data


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """Write a check JSON and point the cost model at it."""
    path = tmp_path / "gpu_check.json"
    monkeypatch.setenv("EXOFORMER_GPU_CHECK", str(path))

    def write(content) -> None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))

    return write


def hours_at(spec, mfu: float, profile) -> float:
    return training_flops(spec) / (profile.gpu.peak_bf16_tflops * 1e12 * mfu) / 3600.0


def test_without_a_measurement_the_assumed_mfu_is_used_and_named(specs, measured):
    profile = load_profile("h100")
    cost = estimate(specs["gated"], profile)
    assert cost.mfu == ASSUMED_MFU and cost.mfu_source == "assumed 40%"
    assert cost.gpu_hours == pytest.approx(hours_at(specs["gated"], 0.40, profile))
    cpu = estimate(specs["gated"], load_profile("cpu"))
    assert cpu.mfu is None and cpu.mfu_source is None


def test_a_measurement_replaces_the_assumption_per_variant_and_says_where_from(specs, measured):
    measured(check_json())
    profile = load_profile("h200")
    gated, dynamic, base = (estimate(specs[k], profile) for k in ("gated", "dynamic", "base"))
    assert gated.mfu == 0.31 and dynamic.mfu == 0.28
    assert gated.mfu_source == "measured by benchmarks/gpu_check.py on NVIDIA H200 2026-12-01"
    assert gated.gpu_hours == pytest.approx(hours_at(specs["gated"], 0.31, profile))
    # a variant the check did not train gets the lowest measured MFU, and the source says so
    assert base.mfu == 0.28 and "lowest measured: dynamic-e-exoformer" in base.mfu_source
    # the same measurement serves another profile of the same bf16 peak (H100 and H200: 989 TFLOP/s)
    assert estimate(specs["gated"], load_profile("h100")).mfu == 0.31


def test_a_measurement_on_another_class_of_gpu_is_not_applied(specs, measured):
    measured(check_json())
    cost = estimate(specs["gated"], load_profile("a100"))
    assert cost.mfu == ASSUMED_MFU
    assert cost.mfu_source.startswith("assumed 40%") and "NVIDIA H200" in cost.mfu_source


def test_an_explicit_override_wins_over_the_measurement(specs, measured):
    measured(check_json())
    cost = estimate(specs["gated"], load_profile("h200", {"gpu.mfu": 0.2}))
    assert cost.mfu == 0.2 and cost.mfu_source == "set by --set profile.gpu.mfu"


@pytest.mark.parametrize("content, why", [
    ("{not json", "not readable JSON"),
    (json.dumps([1, 2]), "not written by benchmarks/gpu_check.py"),
    (check_json(tool="something else"), "not written by benchmarks/gpu_check.py"),
    (check_json(cpu_mode=True), "--cpu run"),
    (check_json(device=""), "no device or date"),
    (check_json(peak_bf16_tflops=None), "no known bf16 peak"),
    (check_json(mfu={}), "no measured MFU"),
    (check_json(mfu={"gated": 1.7}), "not a fraction"),
    (check_json(mfu={"gated": "0.3"}), "not a fraction"),
    (check_json(mfu={"gated": float("nan")}), "not a fraction"),
])
def test_a_malformed_measurement_is_ignored_with_a_clear_note(specs, measured, content, why):
    measured(content)
    _, note = read_measurement()
    assert note is not None and why in note and "gpu_check.json" in note
    cost = estimate(specs["gated"], load_profile("h200"))
    assert cost.mfu == ASSUMED_MFU
    assert cost.mfu_source.startswith("assumed 40% (ignored ") and why in cost.mfu_source


def test_the_measurement_is_reread_when_the_file_changes(specs, measured):
    measured(check_json())
    assert estimate(specs["gated"], load_profile("h200")).mfu == 0.31
    measured(check_json(mfu={"gated": 0.455}))
    assert estimate(specs["gated"], load_profile("h200")).mfu == 0.455


def test_fp32_training_on_a_gpu_is_priced_at_the_bf16_peak_and_says_so(measured):
    profile = load_profile("h100")
    reg = Registry()
    paper = estimate(reg.resolve("gated-s42", preset="450m"), profile)
    fp32 = estimate(reg.resolve("gated-s42", preset="450m", overrides=["train.precision=fp32"]), profile)
    assert paper.mfu_source == "assumed 40%"
    assert fp32.mfu_source == "assumed 40%; train.precision fp32 priced at the bf16 peak: GPU-hours are a lower bound"
    assert fp32.gpu_hours == pytest.approx(paper.gpu_hours)
