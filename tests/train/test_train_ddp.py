"""Data parallel: 2 gloo processes with the same global batch match 1 process (losses and final weights)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_tiny import tiny_model, tiny_train

from exoformer.rundir import VAL_CURVE_KEY
from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint
from exoformer.train.loop import train

RUNNER = Path(__file__).parent / "train_run_tiny.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(run: Path) -> list[float]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [line["loss"] if line["kind"] == "train" else line[VAL_CURVE_KEY] for line in lines]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_gloo_ranks_match_one_process(tiny_data, tmp_path):
    single = tmp_path / "single"
    train(tiny_model(), tiny_train(tiny_data, steps=6, val_every=3), single)

    double = tmp_path / "double"
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(RUNNER), str(tiny_data), str(double), "0", "steps=6",
                                       "val_every=3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outputs = [p.communicate(timeout=150)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outputs)
    assert "2 rank(s)" in outputs[0] and "1 micro-batch(es)" in outputs[0]

    assert losses(double) == pytest.approx(losses(single), rel=1e-4, abs=1e-5)
    a = load_checkpoint(latest_checkpoint(single / "checkpoints"))
    b = load_checkpoint(latest_checkpoint(double / "checkpoints"))
    assert a["step"] == b["step"] == 6 and b["world_size"] == 2
    for name, tensor in a["model"].items():
        torch.testing.assert_close(b["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_ddp_does_not_rebroadcast_the_models_buffers(tmp_path):
    """The only buffers (RoPE tables) are rebuilt identically on every rank: no broadcast per step."""
    from exoformer.model import ExoTransformer
    from exoformer.train.distributed import data_parallel
    from exoformer.train.loss import LossForward

    torch.distributed.init_process_group("gloo", store=torch.distributed.FileStore(str(tmp_path / "store"), 1),
                                         rank=0, world_size=1)
    try:
        ddp = data_parallel(LossForward(ExoTransformer(tiny_model()), 1e-5), torch.device("cpu"))
        assert ddp.broadcast_buffers is False
        with_persistent = torch.nn.Linear(2, 2)
        with_persistent.register_buffer("running", torch.zeros(2))
        assert data_parallel(with_persistent, torch.device("cpu")).broadcast_buffers is True
    finally:
        torch.distributed.destroy_process_group()
