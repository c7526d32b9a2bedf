"""check_placement: GPU profiles without CUDA, precisions the device cannot do, ranks that split the batch."""

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from exoformer.errors import UserError
from exoformer.runs.device_checks import (DeviceInfo, check_placement, probe_local_device, torch_build_backends,
                                          world_size)
from exoformer.registry.profiles import GpuProfile, Profile, SlurmProfile, load_profile
from exoformer.registry.registry import Registry

REPO = Path(__file__).resolve().parents[2]
CPU = DeviceInfo(kind="cpu", name="cpu", bf16=True)
H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", bf16=True)
V100 = DeviceInfo(kind="cuda", name="Tesla V100-SXM2-32GB", bf16=False)
SHRUNK = ["shape=tiny", "train.seq_len=64", "train.batch_tokens=1024", "train.micro_batch_seqs=4"]


@pytest.fixture(scope="module")
def registry():
    return Registry()


def gpu_profile(name: str, gpu: str, *, nodes: int = 1, gpus_per_node: int = 8) -> Profile:
    return Profile(name=name, description="fake", gpu=GpuProfile(name=gpu, peak_bf16_tflops=100.0),
                   slurm=SlurmProfile(nodes=nodes, gpus_per_node=gpus_per_node))


def error_of(*args, **kwargs) -> UserError:
    with pytest.raises(UserError) as caught:
        check_placement(*args, **kwargs)
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("backend", ["local", "inline"])
def test_gpu_profile_on_a_machine_without_cuda_names_the_field_and_the_fix(registry, backend):
    specs = [registry.resolve("gated-s42", overrides=SHRUNK)]
    err = error_of(specs, load_profile("h100"), backend, device=CPU)
    assert err.where == "--profile h100" and "slurm.gpus_per_node" in err.problem and "no CUDA" in err.problem
    assert "--profile cpu" in err.fix
    check_placement(specs, load_profile("h100"), backend, device=H100)
    check_placement(specs, load_profile("cpu"), backend, device=CPU)
    check_placement(specs, None, backend, device=CPU)


def test_cpu_runs_every_precision_and_compile(registry):
    paper = registry.resolve("gated-s42", overrides=SHRUNK)
    assert paper.train.precision == "official-pure-bf16" and paper.train.compile
    specs = [paper, registry.resolve("gated-fp32-master-s42", overrides=SHRUNK),
             registry.resolve("gated-s42", preset="smoke")]
    check_placement(specs, load_profile("cpu"), "local", device=CPU)
    check_placement(specs, load_profile("testcluster"), "slurm")  # CPU-only Slurm: its device is a CPU


@pytest.mark.parametrize("precision", ["official-pure-bf16", "bf16-autocast", "auto"])
def test_bf16_on_a_gpu_without_bf16_is_refused_with_the_fp32_fix(registry, precision):
    spec = registry.resolve("gated-s42", overrides=[f"train.precision={precision}"])
    err = error_of([spec], load_profile("cpu"), "local", device=V100)
    assert err.where == "train.precision of gated-s42" and "V100" in err.problem and precision in err.problem
    assert err.fix.startswith("--set train.precision=fp32")
    check_placement([registry.resolve("gated-s42", overrides=["train.precision=fp32", "eval.precision=fp32"])],
                    load_profile("cpu"), "local", device=V100)
    check_placement([spec], load_profile("cpu"), "local", device=H100)


def test_bf16_scoring_on_a_gpu_without_bf16_is_refused_with_the_fp32_fix(registry):
    spec = registry.resolve("gated-s42", overrides=["train.precision=fp32"])
    err = error_of([spec], load_profile("cpu"), "local", device=V100)
    assert err.where == "gated-s42: eval.precision" and "V100" in err.problem and "bf16" in err.problem
    assert err.fix.startswith("--set eval.precision=fp32")
    check_placement([spec], load_profile("cpu"), "local", device=CPU)


def test_slurm_judges_bf16_by_the_profiles_gpu_name(registry):
    spec = registry.resolve("dynamic-e-exoformer-s42")
    err = error_of([spec], gpu_profile("v100", "Tesla V100-SXM2-32GB"), "slurm")
    assert err.where == "train.precision of dynamic-e-exoformer-s42"
    for name in ("h100", "h200", "a100"):
        check_placement([spec], load_profile(name), "slurm")
    check_placement([spec], gpu_profile("t4", "NVIDIA T4"), "slurm", device=H100)  # an explicit device wins


def test_world_size_is_one_locally_and_nodes_times_gpus_on_slurm():
    two_nodes = load_profile("h100", {"slurm.nodes": 2})
    assert world_size(two_nodes, "local") == world_size(two_nodes, "inline") == 1
    assert world_size(two_nodes, "slurm") == 16
    assert world_size(load_profile("testcluster"), "slurm") == 1
    assert world_size(None, "slurm") == 1


def test_ranks_that_do_not_divide_the_batch_are_refused_with_a_micro_batch_that_does(registry):
    spec = registry.resolve("gated-s42")  # 262,144 tokens = 2048 x 16 x 8 ranks: one micro-batch per rank
    check_placement([spec], load_profile("h100"), "slurm")
    two_nodes = load_profile("h100", {"slurm.nodes": 2})
    err = error_of([spec], two_nodes, "slurm")
    assert err.where == "train.batch_tokens of gated-s42"
    assert "2048 x 16 x 16 = 524288" in err.problem and "slurm.nodes 2 x gpus_per_node 8" in err.problem
    assert err.fix == "--set train.micro_batch_seqs=8"
    fixed = registry.resolve("gated-s42", overrides=["train.micro_batch_seqs=8"])
    check_placement([fixed], two_nodes, "slurm")
    check_placement([spec], two_nodes, "local", device=H100)  # one local rank: any profile divides


def test_a_batch_smaller_than_one_sequence_per_rank_asks_for_fewer_ranks(registry):
    spec = registry.resolve("gated-s42", preset="smoke")  # 2,048 tokens = 8 sequences of 256
    err = error_of([spec], gpu_profile("big", "H100-SXM", nodes=2, gpus_per_node=8), "slurm")
    assert "256 x 8 x 16" in err.problem and "fewer ranks" in err.fix and "multiple of 4096" in err.fix


def test_the_first_bad_spec_is_named(registry):
    good = registry.resolve("gated-s42")
    bad = replace(good, name="other", train=replace(good.train, micro_batch_seqs=12))
    err = error_of([good, bad], load_profile("h100"), "slurm")
    assert err.where == "train.batch_tokens of other"


def test_unknown_backend_and_empty_target():
    assert "did you mean 'slurm'" in error_of([], None, "slrum").fix
    check_placement([], load_profile("h100"), "local", device=CPU)  # nothing to place, nothing to refuse


def test_probe_matches_torch_and_the_module_imports_without_torch():
    torch = pytest.importorskip("torch")
    device = probe_local_device()
    assert device.kind == ("cuda" if torch.cuda.is_available() else "cpu")
    code = ("import sys; import exoformer.runs.device_checks; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('clean')")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "clean" in res.stdout, res.stderr


def test_a_cpu_only_torch_build_is_a_cpu_device_without_importing_torch(tmp_path):
    torch = pytest.importorskip("torch")
    assert torch_build_backends() == {k: v for k, v in (("cuda", torch.version.cuda), ("hip", torch.version.hip))
                                      if v is not None}
    version = tmp_path / "version.py"
    version.write_text("from typing import Optional\n__version__ = '2.13.0'\ncuda: Optional[str] = '12.8'\n"
                       "hip: Optional[str] = None\n")
    assert torch_build_backends(version) == {"cuda": "12.8"}
    version.write_text("cuda = None\nhip = None\n")
    assert torch_build_backends(version) == {}
    for unreadable in ("cuda = None\n", "cuda = get()\nhip = None\n", "cuda = (\n"):  # ask torch instead
        version.write_text(unreadable)
        assert torch_build_backends(version) is None
    assert torch_build_backends(tmp_path / "missing.py") is None
    os.mkfifo(tmp_path / "fifo.py")
    assert torch_build_backends(tmp_path / "fifo.py") is None  # not opened: reading a FIFO would block
    if torch_build_backends() == {}:
        code = ("import sys; from exoformer.runs.device_checks import probe_local_device; "
                "d = probe_local_device(); assert 'torch' not in sys.modules, 'torch imported'; print(d.kind)")
        res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and res.stdout.split() == ["cpu"], res.stderr


def test_flex_attention_cannot_train_on_a_cpu_and_auto_can(registry):
    smoke = registry.resolve("gated-s42", preset="smoke", overrides=["model.attention=flex"])
    err = error_of([smoke], load_profile("cpu"), "local", device=CPU)
    assert err.where == "gated-s42: model.attention" and "no CPU backward" in err.problem
    assert "model.attention=auto" in err.fix
    check_placement([smoke], load_profile("cpu"), "local", device=H100)  # a GPU trains with flex
    paper = registry.resolve("gated-s42", overrides=SHRUNK)
    assert paper.model.attention == "auto"
    check_placement([paper], load_profile("cpu"), "local", device=CPU)  # auto is sdpa on the CPU
