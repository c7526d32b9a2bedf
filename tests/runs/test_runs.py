"""Run directories, STATUS, the manifest and lock, and the `run` verb's bad-input paths (fast, no training)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.runs import locking, rundirs as runs
from exoformer.runs.plan import decide
from exoformer.records import load
from exoformer.registry.registry import Registry
from exoformer.registry.spec import SECTIONS, Spec
from exoformer.rundir import RunDir

TINY = ["--preset", "smoke", "--set", "train.steps=2"]


@pytest.fixture(scope="module")
def spec():
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])


@pytest.fixture()
def other_spec():
    return Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=3"])


def test_status_round_trip_and_torn_files(tmp_path):
    assert runs.read_status(tmp_path) is None
    runs.write_status(tmp_path, runs.Status(state=runs.RUNNING, stage="train", job_id="12_3", backend="slurm"))
    got = runs.read_status(tmp_path)
    assert (got.state, got.stage, got.job_id, got.backend) == ("RUNNING", "train", "12_3", "slurm")
    assert json.loads((tmp_path / "STATUS").read_text())["state"] == "RUNNING"
    (tmp_path / "STATUS").write_text('{"state": "RUNN')  # torn by hand: reads as DAMAGED, never crashes
    assert runs.read_status(tmp_path).state == runs.DAMAGED
    (tmp_path / "STATUS").write_text("SUCCEEDED\n")  # a bare word is not ours: damaged, so it is resumed
    assert runs.read_status(tmp_path).state == runs.DAMAGED
    assert "--retry-failed" in runs.read_status(tmp_path).reason


def test_plan_reads_json_status(tmp_path):
    def action(**kw):
        base = dict(state=None, active=False, has_checkpoint=False, missing_stages=[], exists=True, force=False,
                    retry_failed=False)
        return decide(**{**base, **kw})[0]

    assert action(state=runs.SUCCEEDED) == "skip"
    assert action(state=runs.SUCCEEDED, missing_stages=["evaluate"]) == "resume"
    assert action(state=runs.FAILED, has_checkpoint=True) == "skip"
    assert action(state=runs.FAILED, has_checkpoint=True, retry_failed=True) == "resume"


def test_prepare_writes_spec_and_provenance(tmp_path, spec):
    run_dir = runs.run_dir_for(spec, tmp_path)
    runs.prepare(spec, run_dir, command=["reproduce.py", "run", "base-s42"])
    assert run_dir == tmp_path / "base-s42" / spec.hash12
    for sub in ("stages", "checkpoints", "eval", "analysis", "logs"):
        assert (run_dir / sub).is_dir()
    written = yaml.safe_load((run_dir / "spec.yaml").read_text())
    assert written["hash"] == spec.hash
    rebuilt = Spec(**{key: written[key] for key in ("name", "group", "variant", "shape", "preset", "seed")},
                   **{name: load(cls, written[name], where="spec.yaml", what=name) for name, cls in SECTIONS.items()})
    assert rebuilt.hash == spec.hash  # the exact spec can be rebuilt from its file
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["command"] == ["reproduce.py", "run", "base-s42"]
    assert {"git_sha", "git_dirty", "python", "versions", "submit_host"} <= prov.keys()
    assert prov["versions"]["submitit"] and prov["versions"]["torch"]
    RunDir(run_dir).record_job_provenance({"gpu": None, "host": "h"})
    assert json.loads((run_dir / "provenance.json").read_text())["job"]["host"] == "h"


def test_a_directory_holding_another_hash_is_refused(tmp_path, spec, other_spec):
    run_dir = runs.run_dir_for(spec, tmp_path)
    runs.prepare(other_spec, runs.run_dir_for(other_spec, tmp_path))
    run_dir.mkdir(parents=True)
    foreign = yaml.safe_dump(other_spec.to_dict())
    (run_dir / "spec.yaml").write_text(foreign)
    with pytest.raises(UserError, match="holds another spec"):
        runs.prepare(spec, run_dir)
    assert (run_dir / "spec.yaml").read_text() == foreign


def test_checksums_and_metrics_tail(tmp_path):
    (tmp_path / "a_train_000.bin").write_bytes(b"abc")
    assert runs.data_checksums(tmp_path) == {
        "a_train_000.bin": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(64 << 10))
    assert runs.file_checksum(big, full_limit=1024).startswith("sampled:")
    lines = [{"kind": "train", "step": s, "loss": 9.0 - s} for s in range(1, 4)] + [{"kind": "val", "step": 3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "tr')
    assert RunDir(tmp_path).last_train_line() == {"kind": "train", "step": 3, "loss": 6.0}


def test_manifest_and_liveness(tmp_path):
    claim = locking.new_claim(spec_hash="ab" * 32, name="x", run_dir=tmp_path / "x", backend="inline")
    locking.update_claims(tmp_path, [claim])
    assert locking.read_manifest(tmp_path)["ab" * 32].launcher_pid == os.getpid()
    assert locking.pid_alive(os.getpid())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not locking.pid_alive(dead.pid)
    assert not locking.pid_alive(os.getpid(), expect="no-such-command-line-xyz")


def test_lock_is_exclusive(tmp_path):
    code = ("import sys, time; from pathlib import Path; from exoformer.runs.locking import launch_lock\n"
            "with launch_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(3)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(TimeoutError):
        with locking.launch_lock(tmp_path, timeout_s=0.5):
            pass
    holder.wait()
    with locking.launch_lock(tmp_path, timeout_s=5):
        pass


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bad_input_is_one_line_exit_2(tmp_path, capsys, spec, other_spec):
    root = tmp_path / "runs"
    cases = [
        (["--backend", "slurm", "--profile", "no-such-profile"], "unknown profile"),
        (["--backend", "local", "--profile", "no-such-profile"], "unknown profile"),
        (["--backend", "bogus"], "unknown backend"),
        (["--backend", "slurm"], "needs a cluster profile"),
    ]
    for extra, message in cases:
        code, out, err = _run(capsys, "run", "base-s42", *TINY, "--runs-dir", str(root), *extra)
        assert code == 2 and message in err and err.count("\n") == 1, (extra, err)
    assert not root.exists()  # nothing written for bad input
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    code, _, err = _run(capsys, "run", "base-s42", *TINY, "--runs-dir", str(not_a_dir / "runs"))
    assert code == 2 and "not writable" in err and err.count("\n") == 1
    # the spec's directory holds another spec: refused, nothing changed or deleted
    run_dir = runs.run_dir_for(spec, root)
    run_dir.mkdir(parents=True)
    foreign = yaml.safe_dump(other_spec.to_dict())
    (run_dir / "spec.yaml").write_text(foreign)
    (run_dir / "keep.txt").write_text("precious")
    code, _, err = _run(capsys, "run", "base-s42", *TINY, "--runs-dir", str(root), "--backend", "inline")
    assert code == 2 and "holds another spec" in err and err.count("\n") == 1
    assert (run_dir / "spec.yaml").read_text() == foreign and (run_dir / "keep.txt").read_text() == "precious"
    assert sorted(p.name for p in run_dir.iterdir()) == ["keep.txt", "spec.yaml"]


def test_dry_run_is_plan(tmp_path, capsys):
    code, out, _ = _run(capsys, "run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--dry-run")
    assert code == 0 and "run" in out and "CPU-min" in out
    assert not any(tmp_path.iterdir())


def test_status_without_runs(tmp_path, capsys):
    code, out, _ = _run(capsys, "status", "--runs-dir", str(tmp_path))
    assert code == 0 and "no runs" in out


def test_live_runs_are_never_launched_twice_even_with_force(tmp_path, capsys, spec):
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    runs.write_status(run_dir, runs.Status(state=runs.RUNNING, stage="train", backend="inline"))
    claim = locking.new_claim(spec_hash=spec.hash, name=spec.name, run_dir=run_dir, backend="inline")
    locking.update_claims(tmp_path, [claim])
    code = ("import sys, time\nfrom exoformer.rundir import RunDir\n"
            "with RunDir(sys.argv[1]).job_lock():\n    print('held', flush=True); time.sleep(30)\n")
    job = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "held"
        for extra in ([], ["--force"], ["--retry-failed"]):
            code_, out, _ = _run(capsys, "run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend",
                                 "inline", *extra)
            assert code_ == 0 and "skip: already queued or running" in out, (extra, out)
        assert runs.read_status(run_dir).state == runs.RUNNING
        assert sorted(p.name for p in run_dir.parent.iterdir()) == [spec.hash12]
    finally:
        job.kill()
        job.wait()
    # the job dies (SIGKILL): the run is INTERRUPTED and a plain run resumes it
    code_, out, _ = _run(capsys, "plan", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--json")
    assert json.loads(out)["specs"][0]["action"] == "resume"
    assert runs.read_status(run_dir).state == runs.RUNNING  # plan changes nothing
    code_, out, _ = _run(capsys, "status", "--runs-dir", str(tmp_path))
    got = runs.read_status(run_dir)
    assert got.state == runs.INTERRUPTED and got.reason.startswith("interrupted during train")
