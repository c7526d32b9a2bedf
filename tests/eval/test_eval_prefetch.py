"""prefetch with the two network functions replaced by fakes: layout, checksums, shard checks, env lines."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from exoformer.data.shards import write_shard
from exoformer.errors import UserError
from exoformer.eval import prefetch as pf
from exoformer.eval.suites import PAPER_TASKS, task_configs
from exoformer.eval.task_facts import TASK_FACTS

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import fake_rows  # noqa: E402


@pytest.fixture
def fake_hub(monkeypatch):
    """Hub rows in the real schemas (eval splits of the expected size, 7 here) and tiny valid token shards."""
    import random

    calls = {"splits": [], "files": []}
    real_sizes = {task: 7 for task in PAPER_TASKS}
    for task, n in real_sizes.items():
        monkeypatch.setitem(TASK_FACTS, task, replace(TASK_FACTS[task], documents=n))

    def load_hub_split(path, name, split):
        task = next(t for t in PAPER_TASKS if pf.builtin_config(t)["dataset_path"] == path
                    and pf.builtin_config(t).get("dataset_name") == name)
        calls["splits"].append((path, name, split))
        scored = pf.builtin_config(task).get("test_split") or "validation"
        n = real_sizes[task] if split == scored else 5
        return fake_rows(task, n, random.Random(len(calls["splits"])))

    def download_hub_file(repo_id, filename, local_dir):
        calls["files"].append((repo_id, filename))
        write_shard(Path(local_dir) / filename, np.arange(100, dtype=np.uint16))
        return Path(local_dir) / filename

    monkeypatch.setattr(pf, "load_hub_split", load_hub_split)
    monkeypatch.setattr(pf, "download_hub_file", download_hub_file)
    return calls


def test_prefetch_writes_tasks_and_shards_and_prints_offline_env(tmp_path, fake_hub, capsys):
    env = pf.prefetch(tmp_path / "out", fineweb_shards=2)
    out = (tmp_path / "out").resolve()
    assert env == {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                   "EXOFORMER_DATA_DIR": str(out / "finewebedu10B"), "EXOFORMER_TASK_DIR": str(out / "tasks")}
    printed = capsys.readouterr().out
    assert all(f"export {k}={v}" in printed for k, v in env.items())
    assert ("allenai/ai2_arc", "ARC-Challenge", "test") in fake_hub["splits"]
    assert ("allenai/winogrande", "winogrande_xl", "validation") in fake_hub["splits"]
    assert fake_hub["files"] == [("kjj0/finewebedu10B-gpt2", "finewebedu_val_000000.bin"),
                                 ("kjj0/finewebedu10B-gpt2", "finewebedu_train_000001.bin"),
                                 ("kjj0/finewebedu10B-gpt2", "finewebedu_train_000002.bin")]
    # what prefetch wrote is exactly what the paper suite reads, checksums included
    configs = task_configs("paper", env["EXOFORMER_TASK_DIR"])
    assert len(configs) == 6 and (out / "tasks" / "SHA256SUMS").read_text().count("\n") == 15

    # a second run keeps valid shards and replaces a corrupt one
    (out / "finewebedu10B" / "finewebedu_train_000002.bin").write_bytes(b"junk")
    fake_hub["files"].clear()
    pf.prefetch(tmp_path / "out", fineweb_shards=2)
    assert fake_hub["files"] == [("kjj0/finewebedu10B-gpt2", "finewebedu_train_000002.bin")]


def test_prefetch_refuses_hub_data_with_other_eval_sizes(tmp_path, fake_hub, monkeypatch):
    monkeypatch.setitem(TASK_FACTS, "piqa", replace(TASK_FACTS["piqa"], documents=1))
    with pytest.raises(UserError, match="piqa validation: 7 docs, expected 1"):
        pf.prefetch(tmp_path, fineweb_shards=0)


@pytest.mark.parametrize("bad", [-1, 100, 2.0, True])
def test_prefetch_shard_count_is_checked(tmp_path, bad):
    with pytest.raises(UserError, match="fineweb_shards"):
        pf.prefetch(tmp_path, fineweb_shards=bad)
