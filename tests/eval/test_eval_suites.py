"""Suites: lm-eval's own configs, re-pointed at local files; bad data is a one-line UserError naming the file."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from exoformer.errors import UserError
from exoformer.eval.suites import PAPER_TASKS, named_splits, task_configs
from exoformer.io import sha256_file

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import write_task_dir  # noqa: E402

HUB = {"arc_easy": ("allenai/ai2_arc", "ARC-Easy"), "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge"),
       "hellaswag": ("Rowan/hellaswag", None), "piqa": ("baber/piqa", None),
       "winogrande": ("allenai/winogrande", "winogrande_xl"), "openbookqa": ("allenai/openbookqa", "main")}
SCORED = {"arc_easy": "test", "arc_challenge": "test", "openbookqa": "test", "hellaswag": "validation",
          "piqa": "validation", "winogrande": "validation"}


def test_paper_suite_is_lm_evals_own_configs_with_their_real_helpers():
    configs = {c["task"]: c for c in task_configs("paper")}
    assert tuple(configs) == PAPER_TASKS
    for task, (path, name) in HUB.items():
        cfg = configs[task]
        assert (cfg["dataset_path"], cfg.get("dataset_name")) == (path, name)
        assert (cfg.get("test_split") or cfg["validation_split"]) == SCORED[task]
        assert cfg["output_type"] == "multiple_choice"
        assert [m["metric"] for m in cfg["metric_list"]] == (["acc"] if task == "winogrande" else ["acc", "acc_norm"])
    assert configs["arc_challenge"]["doc_to_text"] == "Question: {{question}}\nAnswer:"  # include: merged
    assert configs["hellaswag"]["process_docs"].__module__ == "lm_eval.tasks.hellaswag.utils"
    wino = configs["winogrande"]
    assert wino["doc_to_text"].__module__ == "lm_eval.tasks.winogrande.preprocess_winogrande"
    doc = {"sentence": "The cup broke because _ was glass.", "option1": "the cup", "option2": "the lamp",
           "answer": "2"}
    assert wino["doc_to_text"](doc) == 1  # partial scoring: the gold index picks the context
    assert wino["doc_to_choice"](doc) == ["The cup broke because the cup", "The cup broke because the lamp"]
    assert wino["doc_to_target"](doc) == "was glass."


def test_paper_suite_with_data_dir_reads_every_named_split_from_absolute_paths(tmp_path, monkeypatch):
    write_task_dir(tmp_path / "tasks")
    monkeypatch.chdir(tmp_path)
    configs = task_configs("paper", "tasks")  # relative on input, absolute in the configs
    for cfg in configs:
        files = cfg["dataset_kwargs"]["data_files"]
        assert cfg["dataset_path"] == "json" and cfg["dataset_name"] is None
        assert sorted(files) == named_splits(cfg) and "train" in files
        for split, path in files.items():
            assert Path(path).is_absolute() and Path(path) == tmp_path / "tasks" / cfg["task"] / f"{split}.jsonl"


def test_missing_task_file_is_a_one_line_user_error_naming_it(tmp_path):
    write_task_dir(tmp_path)
    (tmp_path / "piqa" / "train.jsonl").unlink()
    with pytest.raises(UserError) as err:
        task_configs("paper", tmp_path)
    assert str(tmp_path / "piqa" / "train.jsonl") in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match="directory not found"):
        task_configs("paper", tmp_path / "nowhere")


def test_checksum_mismatch_is_a_one_line_user_error_naming_the_file(tmp_path):
    write_task_dir(tmp_path)
    files = sorted(tmp_path.rglob("*.jsonl"))
    (tmp_path / "SHA256SUMS").write_text("".join(f"{sha256_file(p)}  {p.relative_to(tmp_path)}\n" for p in files))
    assert len(task_configs("paper", tmp_path)) == 6  # sums match
    bad = tmp_path / "winogrande" / "validation.jsonl"
    bad.write_text(bad.read_text().replace("full", "fool"))
    with pytest.raises(UserError) as err:
        task_configs("paper", tmp_path)
    assert "checksum mismatch" in str(err.value) and str(bad) in str(err.value) and "\n" not in str(err.value)


def test_unknown_suite_suggests_the_close_name():
    with pytest.raises(UserError, match="did you mean 'paper'"):
        task_configs("papr")
    with pytest.raises(UserError, match="not a data directory"):
        task_configs("smoke", "/tmp")


def test_smoke_suite_is_the_paper_configs_on_the_committed_files():
    from exoformer.data.smoke import tasks as smoke_tasks
    paper = {c["task"]: c for c in task_configs("paper")}
    smoke = task_configs("smoke")
    assert [c["task"] for c in smoke] == ["smoke_" + t for t in PAPER_TASKS]
    for cfg in smoke:
        base = paper[cfg["task"].removeprefix("smoke_")]
        for key in ("doc_to_text", "doc_to_target", "doc_to_choice", "metric_list", "process_docs", "output_type"):
            assert cfg.get(key) == base.get(key), (cfg["task"], key)
        for path in cfg["dataset_kwargs"]["data_files"].values():
            assert Path(path).is_file() and Path(path).parent.parent == smoke_tasks.SMOKE_DATA_DIR


def test_smoke_suite_checks_its_files_first(tmp_path, monkeypatch):
    from exoformer.data.smoke import tasks as smoke_tasks
    copy = tmp_path / "smoke_data"
    shutil.copytree(smoke_tasks.SMOKE_DATA_DIR, copy)
    monkeypatch.setattr(smoke_tasks, "SMOKE_DATA_DIR", copy)
    target = copy / "smoke_piqa" / "validation.jsonl"
    target.write_bytes(target.read_bytes() + b"\n")
    with pytest.raises(UserError) as err:
        task_configs("smoke")
    assert str(target) in str(err.value) and "\n" not in str(err.value)
    target.unlink()
    with pytest.raises(UserError, match="missing"):
        task_configs("smoke")


def test_truncated_task_file_is_a_one_line_error_naming_file_and_line(tmp_path):
    write_task_dir(tmp_path)
    bad = tmp_path / "hellaswag" / "validation.jsonl"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) - 10])  # cut inside the last row, no checksum file to catch it
    with pytest.raises(UserError) as err:
        task_configs("paper", tmp_path)
    n_lines = data.count(b"\n")
    assert f"{bad}:{n_lines}" in str(err.value) and "truncated" in str(err.value) and "\n" not in str(err.value)
    bad.write_bytes(b"")
    with pytest.raises(UserError, match="holds no rows") as err:
        task_configs("paper", tmp_path)
    assert str(bad) in str(err.value)
    bad.write_bytes(b"[1, 2]\n")
    with pytest.raises(UserError, match=f"{bad}:1.*not an object"):
        task_configs("paper", tmp_path)


def test_malformed_checksum_line_is_a_one_line_error_naming_file_and_line(tmp_path):
    write_task_dir(tmp_path)
    files = sorted(tmp_path.rglob("*.jsonl"))
    lines = [f"{sha256_file(p)}  {p.relative_to(tmp_path)}" for p in files]
    lines[2] = lines[2].replace("  ", "\t")
    (tmp_path / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        task_configs("paper", tmp_path)
    assert f"{tmp_path / 'SHA256SUMS'}:3" in str(err.value) and "\n" not in str(err.value)


def test_smoke_suite_rejects_a_truncated_file_even_with_a_matching_checksum(tmp_path, monkeypatch):
    from exoformer.data.checksums import write_sums
    from exoformer.data.smoke import tasks as smoke_tasks
    copy = tmp_path / "smoke_data"
    shutil.copytree(smoke_tasks.SMOKE_DATA_DIR, copy)
    monkeypatch.setattr(smoke_tasks, "SMOKE_DATA_DIR", copy)
    target = copy / "smoke_piqa" / "train.jsonl"
    target.write_bytes(target.read_bytes()[:-20])
    write_sums(copy, sorted(copy.rglob("*.jsonl")))  # sums regenerated over the damaged file
    with pytest.raises(UserError, match=f"{target}:\\d+: task data line is not JSON"):
        task_configs("smoke")
