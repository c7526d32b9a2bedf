"""The one strict record reader (exoformer/records.py): each refusal is one exact line `WHERE: PROBLEM (fix: FIX)`."""

import pytest

from exoformer.errors import UserError
from exoformer.model.config import ModelConfig
from exoformer.records import check, load
from exoformer.registry.profiles import GpuProfile
from exoformer.run_identity import RunIdentity
from exoformer.rundir import Status
from exoformer.train.config import TrainConfig

IDENTITY = {"spec": "s", "seed": 1, "preset": "smoke", "hash12": "0123456789ab"}


def _message(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("data, message", [
    ({"steps": "abc"}, "run.yaml: train field 'steps' must be an integer, got 'abc' (fix: write an integer)"),
    ({"steps": True}, "run.yaml: train field 'steps' must be an integer, got True (fix: write an integer)"),
    ({"muon_lr": "fast"}, "run.yaml: train field 'muon_lr' must be a number, got 'fast' (fix: write a number)"),
    ({"compile": 1}, "run.yaml: train field 'compile' must be true or false, got 1 (fix: write true or false)"),
    ({"muon_lrr": 0.1}, "run.yaml: unknown train field 'muon_lrr' (fix: did you mean 'muon_lr'?)"),
    ({"steps": None}, "run.yaml: train field 'steps' must not be null (fix: write an integer)"),
    ({"muon_lr": float("nan")}, "run.yaml: train field 'muon_lr' must be a finite number, got nan "
                                "(fix: write a finite number (not .nan or .inf))"),
    ({"steps": 2 ** 64},
     "run.yaml: train field 'steps' does not fit in 64 bits (an integer of 65 bits) (fix: write a smaller integer)"),
    ([1], "run.yaml: not a train record (fix: write `field: value` pairs)"),
])
def test_a_bad_record_is_one_exact_line(data, message):
    assert _message(load, TrainConfig, data, where="run.yaml", what="train") == message


def test_bounds_of_a_field_stay_with_its_dataclass():
    assert _message(load, TrainConfig, {"steps": 0}, where="run.yaml", what="train") == \
        "train.steps: must be positive, got 0 (fix: use a value > 0)"


def test_an_integer_is_a_number_and_lists_are_tuples():
    cfg = load(TrainConfig, {"muon_lr": 1}, where="run.yaml", what="train")
    assert cfg.muon_lr == 1 and isinstance(cfg.muon_lr, int)  # a record keeps what it says (hashes unchanged)
    as_float = check(1, "float", where="x", yaml=True)
    assert as_float == 1.0 and isinstance(as_float, float)
    assert check("1e-5", "float", where="x", yaml=True) == 1e-5  # YAML 1.1 reads 1e-5 as a string
    assert _message(check, "1e-5", "float", where="x") == "x: must be a number, got '1e-5' (fix: write a number)"
    model = load(ModelConfig, {"mix_paths": ["q", "v"], "anchor": "h0"}, where="ckpt", what="model")
    assert model.mix_paths == ("q", "v")
    assert _message(check, ["q", 1], "tuple[str, ...]", where="x") == \
        "x: must be a list of strings, got ['q', 1] (fix: write a list of strings)"


def test_a_record_from_a_registry_layer_reads_floats_as_yaml_writes_them():
    gpu = load(GpuProfile, {"name": "H100", "peak_bf16_tflops": 989, "mfu": "4e-1"}, where="h100.yaml:2", what="gpu",
               yaml=True)
    assert (gpu.peak_bf16_tflops, gpu.mfu) == (989.0, 0.4) and isinstance(gpu.peak_bf16_tflops, float)
    assert _message(load, GpuProfile, {"name": "H100", "peak_bf16_tflops": "4e-1"}, where="h100.yaml:2", what="gpu") \
        == "h100.yaml:2: gpu field 'peak_bf16_tflops' must be a number, got '4e-1' (fix: write a number)"


def test_a_list_of_mappings_holds_only_mappings():
    assert check([{"id": "r"}], "tuple[dict[str, Any], ...]", where="x") == ({"id": "r"},)
    assert _message(check, [{"id": "r"}, 3], "tuple[dict[str, Any], ...]", where="x") == \
        "x: must be a list of mappings, got [{'id': 'r'}, 3] (fix: write a list of mappings)"


def test_optional_fields_take_null_and_only_they():
    assert check(None, "int | None", where="x") is None
    assert _message(check, "a", "int | None", where="x") == \
        "x: must be an integer or null, got 'a' (fix: write an integer)"
    assert _message(check, None, "int", where="x") == "x: must not be null (fix: write an integer)"


def test_a_missing_required_field_and_a_fix_of_the_caller():
    assert _message(load, RunIdentity, {**IDENTITY, "hash12": None}, where="id.json", what="run identity") == \
        "id.json: run identity field 'hash12' must not be null (fix: write a string)"
    no_hash = {k: v for k, v in IDENTITY.items() if k != "hash12"}
    assert _message(load, RunIdentity, no_hash, where="id.json", what="run identity") == \
        "id.json: the run identity has no 'hash12' (fix: add hash12)"
    assert _message(RunIdentity.from_dict, {**IDENTITY, "seed": "42"}, where="id.json") == \
        "id.json: run identity field 'seed' must be an integer, got '42' (fix: the run directory is damaged: " \
        "re-run it with --force)"
    assert RunIdentity.from_dict({**IDENTITY, "a_later_field": 1}, where="id.json").spec == "s"  # ignored


def test_instances_made_in_code_are_checked_without_conversion():
    assert _message(TrainConfig, compile="yes") == \
        "train.compile: must be true or false, got 'yes' (fix: write true or false)"
    assert _message(ModelConfig, mix_paths=["v"], anchor="h0") == \
        "model.mix_paths: must be a tuple, got ['v'] (fix: pass a tuple)"
    assert _message(ModelConfig, gated=1) == "model.gated: must be true or false, got 1 (fix: write true or false)"


def test_status_records_ignore_unknown_keys():
    status = load(Status, {"state": "RUNNING", "pid": 7, "later": 1}, where="STATUS", what="status",
                  ignore_unknown=True)
    assert (status.state, status.pid) == ("RUNNING", 7)
    assert _message(load, Status, {"state": "RUNNING", "pid": True}, where="STATUS", what="status") == \
        "STATUS: status field 'pid' must be an integer or null, got True (fix: write an integer)"
