"""Real smoke runs through the CLI, and the one runs root of them a test session trains once (tests/conftest.py
`smoke_main_job`): the README's main job, `run table1 --preset smoke`, cut down to seconds by `tiny()`, plus
the anchor-norm ablation's spec. Tests read that root as it is; a test that writes into a runs root copies it
first (`copy_root`), never changing the shared one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MAIN_JOB_SPECS = ("table1", "e-exoformer-no-anchor-norm-s42")
"""What `smoke_main_job` runs: Table 1's nine specs (one seed) and the spec the anchor-norm table adds."""


def tiny(steps: int = 4, checkpoint_every: int = 2, *, analysis: bool = True) -> list[str]:
    """The smoke preset cut down to seconds: 512-token steps, a few eval examples, one analysis sequence (or no
    analysis stage at all)."""
    sets = [f"train.steps={steps}", "train.batch_tokens=512", "train.micro_batch_seqs=2",
            f"train.checkpoint_every={checkpoint_every}", "train.val_every=0", "train.val_batches=1",
            "train.final_val_tokens=512", "train.warmup_steps=1", "train.muon_momentum_steps=1", "eval.limit=2",
            "analysis.n_sequences=1" if analysis else "analysis.enabled=false"]
    return ["--preset", "smoke", *[a for s in sets for a in ("--set", s)]]


def cli_env(runs_dir: Path) -> dict[str, str]:
    """The environment of a `reproduce.py` child: this runs root, one thread, no Slurm configuration."""
    env = {**os.environ, "EXOFORMER_RUNS_DIR": str(runs_dir), "OMP_NUM_THREADS": "1"}
    env.pop("SLURM_CONF", None)
    return env


def cli(*args: str, runs_dir: Path, timeout: float = 600, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, str(REPO / "reproduce.py"), *args], capture_output=True, text=True,
                          env=cli_env(runs_dir), timeout=timeout, cwd=REPO)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def run_dir_of(name: str, args: list[str], root: Path) -> Path:
    """The run directory `reproduce.py run NAME *args` uses under `root` (args in the form tiny() gives)."""
    from exoformer.registry.registry import Registry  # here, so that tests/conftest.py imports no registry
    from exoformer.runs import rundirs as runs

    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    return runs.run_dir_for(Registry().resolve(name, preset="smoke", overrides=sets), root)


def train_main_job(root: Path) -> Path:
    """`run table1` on the local backend (two jobs at a time), then the anchor-norm ablation's spec, each `tiny()`:
    every run SUCCEEDED at step 4 with checkpoints at steps 2 and 4, evaluated and analysed."""
    args = tiny()
    cli("run", MAIN_JOB_SPECS[0], *args, "--backend", "local", "--jobs", "2", runs_dir=root, timeout=1500, check=True)
    cli("run", MAIN_JOB_SPECS[1], *args, "--backend", "local", runs_dir=root, timeout=600, check=True)
    return root


def copy_root(shared: Path, to: Path, specs: tuple[str, ...] | None = None) -> Path:
    """A copy of a shared runs root at `to` for a test that writes into it: everything, or only the run
    directories of `specs` (a root holding those runs alone)."""
    if specs is None:
        shutil.copytree(shared, to, symlinks=True)
    else:
        to.mkdir(parents=True)
        for name in specs:
            shutil.copytree(shared / name, to / name, symlinks=True)
    return to
