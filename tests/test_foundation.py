"""The shared foundation: one-line user errors, atomic writes, strict train config."""

import os

import pytest

from exoformer.errors import UserError, did_you_mean
from exoformer.io import atomic_write_json, atomic_write_text
from exoformer.train.config import TrainConfig


def test_user_error_is_one_line_with_where_and_fix():
    err = UserError("bad\nvalue  here", where="a.yaml:3", fix="use\n 4")
    assert str(err) == "a.yaml:3: bad value here (fix: use 4)"
    assert "\n" not in str(err)


def test_did_you_mean_suggests_close_names_or_lists_choices():
    assert "'gated'" in did_you_mean("gatd", ["gated", "base"])
    assert did_you_mean("zzz", ["gated", "base"]).startswith("valid choices: base, gated")


def test_atomic_write_keeps_old_content_when_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    atomic_write_json(target, {"v": 1})

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temp file left behind


def test_train_config_defaults_are_the_official_recipe():
    cfg = TrainConfig()
    assert cfg.tokens == 38_147 * 262_144 == 10_000_007_168
    assert cfg.accumulation_steps(world_size=1) == 8
    assert cfg.accumulation_steps(world_size=8) == 1


@pytest.mark.parametrize(
    "kwargs, field",
    [({"steps": 0}, "train.steps"), ({"steps": 1.5}, "train.steps"), ({"precision": "bf16"}, "train.precision"),
     ({"batch_tokens": 1000}, "train.batch_tokens"), ({"compile": "yes"}, "train.compile")],
)
def test_train_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(UserError) as info:
        TrainConfig(**kwargs)
    assert str(info.value).startswith(field + ":")


def test_train_config_from_dict_rejects_unknown_keys_with_suggestion():
    with pytest.raises(UserError, match="did you mean 'muon_lr'"):
        TrainConfig.from_dict({"muon_lrr": 0.02})
    with pytest.raises(UserError, match="not a multiple"):
        TrainConfig(batch_tokens=4096, seq_len=256, micro_batch_seqs=3).accumulation_steps()


def test_atomic_write_gives_normal_file_permissions(tmp_path):
    from exoformer import io

    path = atomic_write_text(tmp_path / "a.txt", "x")
    assert path.stat().st_mode & 0o777 == 0o666 & ~io._UMASK


def test_temporary_env_restores_set_and_unset_keys(monkeypatch):
    from exoformer.environ import temporary_env

    monkeypatch.setenv("EXO_T_SET", "old")
    monkeypatch.delenv("EXO_T_UNSET", raising=False)
    with temporary_env({"EXO_T_SET": "new", "EXO_T_UNSET": "x"}):
        assert os.environ["EXO_T_SET"] == "new" and os.environ["EXO_T_UNSET"] == "x"
    assert os.environ["EXO_T_SET"] == "old" and "EXO_T_UNSET" not in os.environ
