"""Chaos: a 3-spec table under the local backend while a seeded driver sends SIGKILL, SIGTERM or SIGHUP to a job,
its submitit controller, the launcher or the whole process group at random moments. After plain reruns the
table and every result row equal an uninterrupted run's bit for bit, nothing is FAILED, and no temporary file of
an atomic write is left anywhere under the runs root.

The runs are the smallest the real pipeline allows (4 steps of a 2-layer smoke model, 2 examples per smoke task,
no analysis), so the test measures the harness's recovery, not training.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from exoformer.rundir import RunDir, is_hash12

REPO = Path(__file__).resolve().parents[2]
TABLE = "chaos"
TINY = ["--preset", "smoke", "--set", "train.steps=4", "--set", "train.checkpoint_every=1",
        "--set", "train.val_every=2", "--set", "train.val_batches=1", "--set", "train.final_val_tokens=2048",
        "--set", "model.n_layer=2", "--set", "eval.limit=2", "--set", "eval.num_fewshot=0",
        "--set", "analysis.enabled=false"]
COLUMNS = ("val_ppl", "arc_easy", "piqa")
TEMP_NAME = re.compile(r"\A\..+\.[A-Za-z0-9_]{8}\.tmp\Z")
"""A temporary file of an atomic write (tempfile.mkstemp's `.<target>.<8 random>.tmp`)."""
TRIALS = 10
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGHUP)
TARGETS = ("job", "controller", "launcher", "group")


def _registry(tmp_path: Path) -> Path:
    reg = tmp_path / "registry"
    shutil.copytree(REPO / "experiments", reg)
    with (reg / "tables.yaml").open("a", encoding="utf-8") as f:
        f.write(f"""  {TABLE}:
    title: "Three models, for the chaos test"
    paper_ref: "none (a test table)"
    columns: [val_ppl, arc_easy, piqa]
    rows:
      - {{id: base, label: "Base", specs: [base-s42]}}
      - {{id: gated, label: "Gated", specs: [gated-s42]}}
      - {{id: resformer, label: "ResFormer", specs: [resformer-s42]}}
""")
    reported = yaml.safe_load((REPO / "results" / "paper" / "reported.yaml").read_text())
    reported["tables"][TABLE] = {row: {c: {"value": None, "reason": "a test table"} for c in COLUMNS}
                                 for row in ("base", "gated", "resformer")}
    (reg / "reported.yaml").write_text(yaml.safe_dump(reported))
    return reg


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "EXOFORMER_RUNS_DIR": str(root), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
           "EXOFORMER_REPORTED": str(root.parent / "registry" / "reported.yaml")}
    env.pop("SLURM_CONF", None)
    return env


def _run_cmd(reg: Path) -> list[str]:
    return [sys.executable, str(REPO / "reproduce.py"), "run", TABLE, *TINY, "--registry", str(reg),
            "--backend", "local", "--jobs", "2", "--timeout-min", "10"]


def _session(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process of session `sid`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append((int(stat.parent.name), cmd))
    return out


def _wait_session_gone(sid: int, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _session(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid, _ in _session(sid):  # never leave a process behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not _session(sid), "processes of a trial outlived it"


def _table(reg: Path, root: Path) -> str:
    done = subprocess.run([sys.executable, str(REPO / "reproduce.py"), "table", TABLE, *TINY, "--registry", str(reg),
                           "--format", "csv"], capture_output=True, text=True, env=_env(root), cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _results(root: Path) -> dict[str, bytes]:
    """Every run's result files, by spec name: evaluation rows and the validation record's rows."""
    import json

    out = {}
    for rd in (RunDir(p.parent) for p in sorted(root.glob("*/*/spec.yaml")) if is_hash12(p.parent.name)):
        validation = json.loads(rd.validation.read_text())
        out[rd.path.parent.name] = rd.eval_rows.read_bytes() + json.dumps(validation["rows"]).encode()
    return out


def _plain_runs(reg: Path, root: Path, *, tries: int = 4) -> None:
    for _ in range(tries):
        launcher = subprocess.Popen(_run_cmd(reg), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    env=_env(root), cwd=REPO, start_new_session=True)
        out, _ = launcher.communicate(timeout=600)
        _wait_session_gone(launcher.pid)
        if launcher.returncode == 0 and out.count("skip: SUCCEEDED") == 3:
            return
    raise AssertionError(f"plain reruns did not finish the table:\n{out}")


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if TEMP_NAME.match(p.name)]


@pytest.mark.slow
def test_random_kills_then_plain_reruns_give_the_uninterrupted_table(tmp_path):
    reg = _registry(tmp_path)
    calm, chaos = tmp_path / "calm", tmp_path / "chaos"
    _plain_runs(reg, calm)
    rng = random.Random(20)
    sent = []
    for _ in range(TRIALS):
        launcher = subprocess.Popen(_run_cmd(reg), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=_env(chaos), cwd=REPO, start_new_session=True)
        time.sleep(rng.uniform(0.5, 9.0))
        target, sig = rng.choice(TARGETS), rng.choice(SIGNALS)
        procs = _session(launcher.pid)
        jobs = [pid for pid, cmd in procs if "submitit.core._submit" in cmd]
        controllers = [pid for pid, cmd in procs if "submitit.local._local" in cmd]
        if target == "group":
            os.killpg(launcher.pid, sig)
        else:
            pids = {"job": jobs, "controller": controllers, "launcher": [launcher.pid]}[target] or [launcher.pid]
            os.kill(rng.choice(pids), sig)
        sent.append((target, sig.name))
        try:
            launcher.wait(timeout=180)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
        _wait_session_gone(launcher.pid)
    _plain_runs(reg, chaos)
    assert _results(chaos) == _results(calm), sent
    assert _table(reg, chaos) == _table(reg, calm)
    assert not _temp_files(chaos), (_temp_files(chaos), sent)
    assert len({t for t, _ in sent}) >= 3 and len({s for _, s in sent}) == 3, sent
