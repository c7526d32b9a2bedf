"""Subprocess entry for the fail-together tests: one rank of a 2-rank tiny run, one of which fails early.

usage: train_run_failing_rank.py DATA OUT FAILING_RANK WHERE
WHERE is `before-group` (the failing rank raises before training starts, as rank 0 does when its job lock
is taken) or `before-barrier` (rank 0 is given a data folder that does not exist, which only rank 0 reads
before the first barrier). Prints `ERROR <message>` and exits 3 when this rank stops on an error.
"""

import os
import sys
import threading
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from train_tiny import tiny_model, tiny_train  # noqa: E402

from exoformer.errors import UserError  # noqa: E402
from exoformer.train.distributed import fail_together  # noqa: E402
from exoformer.train.loop import train  # noqa: E402


def main() -> int:
    torch.set_num_threads(1)
    data, out, failing, where = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rank = int(os.environ["RANK"])
    try:
        with fail_together():
            if rank == failing and where == "before-group":
                raise UserError("this rank cannot start", where=f"rank {rank}", fix="nothing: the test wants it")
            if rank == failing and where == "before-barrier":
                data = data / "missing"
            train(tiny_model(), tiny_train(data, steps=2, val_every=0), out)
    except Exception as err:  # noqa: BLE001 - the test reads the message
        print(f"ERROR {type(err).__name__}: {err}", flush=True)
        watchers_left()
        return 3
    watchers_left()
    print("DONE", flush=True)
    return 0


def watchers_left() -> None:
    """Prints `WATCHER ALIVE` when fail_together left its watcher thread running (it may be inside a store call
    when the process exits)."""
    if any(t.name == "exoformer-fail-together" and t.is_alive() for t in threading.enumerate()):
        print("WATCHER ALIVE", flush=True)


if __name__ == "__main__":
    sys.exit(main())
