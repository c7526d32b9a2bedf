"""slurm.tasks_per_node: one task per GPU unless a (CPU) profile says how many gloo ranks to start."""

from pathlib import Path

import pytest

from exoformer.errors import UserError
from exoformer.runs.device_checks import world_size
from exoformer.registry.profiles import load_profile


def write_profile(directory: Path, name: str, slurm: str, gpu: str = "null") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.yaml").write_text(f"description: test\ngpu: {gpu}\nslurm:\n{slurm}")


def test_tasks_default_to_one_per_gpu_and_follow_tasks_per_node():
    assert load_profile("h100").slurm.tasks == 8 and load_profile("testcluster").slurm.tasks == 1
    two = load_profile("testcluster-2tasks")
    assert two.slurm.tasks_per_node == 2 and two.slurm.tasks == 2
    assert world_size(two, "slurm") == 2 and world_size(two, "local") == 1
    assert load_profile("testcluster", {"slurm.tasks_per_node": 3}).slurm.tasks == 3


@pytest.mark.parametrize(("slurm", "words"), [
    ("  gpus_per_node: 0\n  tasks_per_node: 0\n", "slurm.tasks_per_node must be >= 1"),
    ("  gpus_per_node: 4\n  tasks_per_node: 2\n", "differs from gpus_per_node=4"),
    ("  gpus_per_node: 0\n  tasks_per_node: two\n", "must be an integer or null"),
])
def test_bad_tasks_per_node_is_one_line_naming_the_field(tmp_path, monkeypatch, slurm, words):
    gpu = "{name: H100-SXM, peak_bf16_tflops: 989}" if "gpus_per_node: 4" in slurm else "null"
    write_profile(tmp_path, "bad", slurm, gpu)
    monkeypatch.setenv("EXOFORMER_PROFILES", str(tmp_path))
    with pytest.raises(UserError) as caught:
        load_profile("bad")
    assert words in str(caught.value) and "\n" not in str(caught.value)
