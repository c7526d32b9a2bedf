"""Subprocess entry for the timeout test: one rank of a 2-rank tiny run under fail_together in which rank 0
alone prepares the data and saves each checkpoint SLOW_S seconds slower than usual.

usage: train_run_slow_rank_zero.py DATA OUT SLOW_S
Prints `DONE <step>` and exits 0 when the rank finishes, `ERROR <message>` and exits 3 when it stops on an error.
"""

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from train_tiny import tiny_model, tiny_train  # noqa: E402

from exoformer.train import checkpoint, loop  # noqa: E402
from exoformer.train.distributed import fail_together  # noqa: E402


def slowly(fn, seconds: float):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return fn(*args, **kwargs)
    return slow


def main() -> int:
    torch.set_num_threads(1)
    data, out, slow_s = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    if os.environ["RANK"] == "0":  # only rank 0 runs these two phases
        loop.resolve_data_dir = slowly(loop.resolve_data_dir, slow_s)
        checkpoint.sha256_file = slowly(checkpoint.sha256_file, slow_s)  # inside the checkpoint write
    try:
        with fail_together():
            result = loop.train(tiny_model(), tiny_train(data, steps=2, val_every=0), out)
    except Exception as err:  # noqa: BLE001 - the test reads the message
        print(f"ERROR {type(err).__name__}: {err}", flush=True)
        return 3
    print(f"DONE {result.step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
