"""metrics.jsonl on resume: damaged lines are dropped with a warning naming file:line, never a traceback."""

import json

import pytest
from train_tiny import tiny_model, tiny_train

from exoformer.train.checkpoint import checkpoint_name
from exoformer.train.loop import train
from exoformer.train.state import MetricsLog


def test_damaged_lines_are_reported_with_file_and_line_and_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"kind": "train", "step": 1}).encode(), b"\xff\xfe not utf-8",
             json.dumps({"kind": "train", "step": "2"}).encode(), b"[1, 2]", b"",
             json.dumps({"kind": "train", "step": 3}).encode(), json.dumps({"kind": "train", "step": 9}).encode(),
             b'{"kind": "train", "st']  # torn last line: dropped silently
    path.write_bytes(b"\n".join(lines))
    with pytest.warns(UserWarning) as caught:
        MetricsLog(path, resume_step=3).close()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3
    assert f"{path}:2:" in messages[0] and "not UTF-8" in messages[0]
    assert f"{path}:3:" in messages[1] and "not an integer" in messages[1]
    assert f"{path}:4:" in messages[2] and "not an object" in messages[2]
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 3]


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}')
    MetricsLog(path, resume_step=5).close()
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_resume_works_past_a_garbage_line(tiny_data, tmp_path):
    reference = tmp_path / "reference"
    train(tiny_model(), tiny_train(tiny_data), reference)
    run = tmp_path / "run"
    train(tiny_model(), tiny_train(tiny_data), run)
    for suffix in ("", ".sha256"):  # back to step 10, as if killed before the final save
        (run / "checkpoints" / (checkpoint_name(12) + suffix)).unlink()
    metrics = run / "metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    lines.insert(3, b"\x00\x9c garbage")
    metrics.write_bytes(b"\n".join(lines))
    with pytest.warns(UserWarning, match=f"{metrics}:4: dropping a damaged metrics line"):
        assert train(tiny_model(), tiny_train(tiny_data), run).step == 12

    def without_timing(path):
        return [{k: v for k, v in json.loads(line).items() if k not in ("ms_per_step", "tokens_per_s")}
                for line in path.read_text().splitlines()]

    assert without_timing(metrics) == without_timing(reference / "metrics.jsonl")


def test_validation_lines_carry_the_author_convention_under_its_own_key(tiny_data, tmp_path):
    """The curve figures and ratios read (RunDir.val_curve) is estimate_loss's: per-batch mean of CE + 2 x z-loss,
    the final validation's `val_loss` on the same batches; pure cross-entropy sits beside it under VAL_CE_KEY."""
    from exoformer.rundir import VAL_CE_KEY, VAL_CURVE_KEY, RunDir
    from exoformer.train.loop import final_validation

    cfg = tiny_train(tiny_data)
    train(tiny_model(), cfg, tmp_path)
    vals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"val"' in line]
    assert [v["step"] for v in vals] == [4, 8, 12]
    assert all(set(v) == {"kind", "step", "tokens", VAL_CURVE_KEY, VAL_CE_KEY} for v in vals)
    same_batches = final_validation(tiny_model(), cfg, tmp_path,
                                    tokens=cfg.val_batches * cfg.micro_batch_seqs * cfg.seq_len)
    assert vals[-1][VAL_CURVE_KEY] == pytest.approx(same_batches["val_loss"], rel=1e-9)
    assert vals[-1][VAL_CE_KEY] == pytest.approx(same_batches["val_loss_ce"], rel=1e-9)
    assert all(v[VAL_CURVE_KEY] > v[VAL_CE_KEY] for v in vals)  # the z-loss term, counted twice, is positive
    assert RunDir(tmp_path).val_curve()[1] == [v[VAL_CURVE_KEY] for v in vals]
