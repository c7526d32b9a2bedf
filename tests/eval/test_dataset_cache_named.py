"""A truncated Arrow file in the datasets cache of the task files (issue 40, item 5): pyarrow raises a plain
OSError ("Expected to be able to read N bytes for message body"), which every evaluation would repeat without a
hint; it becomes one line naming the cache folder and the fix. An OSError of the system keeps its own message."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

from exoformer.errors import UserError
from exoformer.eval.run import dataset_cache_errors, evaluate

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import RecordingLM, write_task_dir  # noqa: E402


def test_a_truncated_arrow_file_in_the_dataset_cache_is_one_line_with_the_fix(tmp_path):
    write_task_dir(tmp_path / "tasks", n=200)  # splits of 200 documents: Arrow files of several record batches
    kwargs = {"data_dir": tmp_path / "tasks", "num_fewshot": 0, "cache_dir": tmp_path / "hf", "limit": 1}
    evaluate(RecordingLM(), None, "paper", **kwargs)
    arrow = sorted((tmp_path / "hf" / "datasets").rglob("*.arrow"))[0]
    arrow.write_bytes(arrow.read_bytes()[:4000])  # cut inside the first record batch's body
    with pytest.raises(UserError) as caught:
        evaluate(RecordingLM(), None, "paper", **kwargs)
    line = str(caught.value)
    cache = tmp_path / "hf" / "datasets"
    assert "\n" not in line and line.startswith(f"{cache}: the dataset cache cannot be read (OSError: Expected to "
                                                "be able to read "), line
    assert f"(fix: delete that folder (rm -rf {cache})" in line and "reproduce.py prefetch" in line, line


def test_an_os_error_of_the_system_is_not_blamed_on_the_cache(tmp_path):
    with pytest.raises(OSError) as caught, dataset_cache_errors(tmp_path, None):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not isinstance(caught.value, UserError) and caught.value.errno == errno.ENOSPC
