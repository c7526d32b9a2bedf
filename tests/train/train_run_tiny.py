"""Subprocess entry for the resume and DDP tests: train the tiny run; exit 75 when interrupted.

usage: train_run_tiny.py DATA OUT [STEP_DELAY_S] [key=value ...]  (TrainConfig overrides, ints only)
"""

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from train_tiny import tiny_model, tiny_train  # noqa: E402

from exoformer.model import ExoTransformer  # noqa: E402
from exoformer.train.loop import train  # noqa: E402

EXIT_PREEMPTED = 75
"""The exit status of an interrupted run: the caller's sign to requeue it."""


def main() -> int:
    torch.set_num_threads(1)
    data, out, delay = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    overrides = {k: int(v) for k, v in (a.split("=") for a in sys.argv[4:])}

    def slow_model(config):
        model = ExoTransformer(config)
        if delay:
            model.final_norm.register_forward_hook(lambda *_: time.sleep(delay))
        return model

    result = train(tiny_model(), tiny_train(data, **overrides), out, build_model=slow_model)
    print("RESULT " + json.dumps({"step": result.step, "interrupted": result.interrupted}), flush=True)
    return EXIT_PREEMPTED if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
