"""Each failure names its cause where the user looks (issue 40, item 5): a job that fails its health check for lack
of disk room says so in STATUS, so `run` and `status` print it (not "not run" / NEW); a launch lock held by
another process is named, with its pid and host, at once (`run --no-wait` exits 2, a timeout blames the lock,
never the disk); and every environment variable that names a directory is refused in one line naming
`$EXOFORMER_...` when it names a FIFO, a file or nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.runs import locking, rundirs as runs

REPO = Path(__file__).resolve().parents[2]
TINY = ["--preset", "smoke", "--set", "train.steps=2"]
HOST = socket.gethostname()


def _one_line(capsys, code: int, *pieces: str) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (code, err)
    for piece in pieces:
        assert piece in err, (piece, err)
    return err


# ------------------------------------------------------------------------------------ 1. the health check's disk

FULL_DISK = """import os, shutil
_real = shutil.disk_usage
def _full(path):
    usage = _real(path)
    under = os.path.abspath(path).startswith(os.environ["EXOFORMER_TEST_FULL_DISK"])
    return usage._replace(free=0) if under else usage
shutil.disk_usage = _full
"""


def test_a_full_disk_at_job_start_is_in_status_for_run_and_status(tmp_path):
    """A real `run --backend local` whose job finds no room for two checkpoints under the runs root (every process
    of the command sees free=0 there, through a sitecustomize): `run` and `status` both print FAILED with the
    health check's line and its fix, not "(not run)" and NEW."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FULL_DISK)
    root = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "EXOFORMER_TEST_FULL_DISK": str(root), "OMP_NUM_THREADS": "1"}
    env.pop("EXOFORMER_RUNS_DIR", None)
    env.pop("SLURM_CONF", None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "reproduce.py"), *args, "--runs-dir", str(root)],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=120)

    ran = cli("run", "base-s42", *TINY, "--backend", "local", "--jobs", "1")
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    assert "(not run)" not in ran.stdout and "NEW" not in ran.stdout, ran.stdout
    for out in (ran.stdout, cli("status").stdout):
        line = next(line for line in out.splitlines() if line.startswith("base-s42") and "  smoke  " in line)
        assert " FAILED " in line and "health check: 0.00 GB free on the disk of the run directory" in line, out
        assert "2 checkpoints need" in line and "(fix: free space on that disk" in line, out
        assert "--retry-failed" in line, out  # a plain `run` skips a FAILED run: the fix says how to relaunch it
    assert "not done: base-s42 (FAILED: " in ran.stdout, ran.stdout
    status = runs.read_status(next(root.glob("base-s42/*")))
    assert status.state == runs.FAILED and Path(status.log).is_file()  # the job's stderr, with the same line
    assert "health check: 0.00 GB free" in Path(status.log).read_text()


# ------------------------------------------------------------------------------------ 2. the launch lock

HOLD = ("import sys, time; from pathlib import Path; from exoformer.runs.locking import launch_lock\n"
        "with launch_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(float(sys.argv[2]))\n")


@pytest.fixture()
def holder(tmp_path):
    """Another process holding the launch lock of tmp_path (for `seconds`), killed at the end of the test."""
    started = []

    def start(seconds: float) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), str(seconds)], stdout=subprocess.PIPE,
                                text=True, cwd=REPO)
        started.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_run_no_wait_names_the_holder_at_once(tmp_path, capsys, holder, fake_stages):
    proc = holder(60)
    begun = time.monotonic()
    code = main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline", "--no-wait"])
    _one_line(capsys, code, f"held by pid {proc.pid} on {HOST}", str(tmp_path / ".launch.lock"))
    assert time.monotonic() - begun < 10
    assert not list(tmp_path.glob("base-s42/*/STATUS"))  # nothing was queued


def test_a_lock_held_past_the_timeout_blames_the_lock_not_the_disk(tmp_path, capsys, holder, fake_stages,
                                                                   monkeypatch):
    proc = holder(60)
    monkeypatch.setitem(locking.launch_lock.__wrapped__.__kwdefaults__, "timeout_s", 0.3)
    code = main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"])
    waiting, err = capsys.readouterr().err.splitlines()
    assert waiting == f"waiting for the launch lock of {tmp_path}, held by pid {proc.pid} on {HOST}", waiting
    assert code == 2 and err.startswith(f"error: {tmp_path / '.launch.lock'}: the launch lock of {tmp_path} has "
                                        f"been held by pid {proc.pid} on {HOST} for over 0 s (fix: "), err
    assert "disk" not in err and "cannot write the runs root" not in err, err


def test_a_blocked_run_says_once_who_holds_the_lock_and_keeps_waiting(tmp_path, capsys, holder, fake_stages):
    proc = holder(1.5)
    code = main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"])
    err = capsys.readouterr().err
    assert code == 0, err
    said = [line for line in err.splitlines() if line.startswith("waiting for the launch lock")]
    assert said == [f"waiting for the launch lock of {tmp_path}, held by pid {proc.pid} on {HOST}"], err
    assert runs.read_status(next(tmp_path.glob("base-s42/*"))).state == runs.SUCCEEDED


def test_the_lock_file_names_its_holder_and_a_stale_record_is_not_believed(tmp_path):
    with locking.launch_lock(tmp_path):
        assert f'"pid": {os.getpid()}' in (tmp_path / ".launch.lock").read_text()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".launch.lock").write_text(f'{{"pid": {dead.pid}, "host": "{HOST}"}}\n')
    fd = os.open(tmp_path / ".launch.lock", os.O_RDONLY)
    try:
        assert locking._lock_holder(fd) == locking.UNKNOWN_HOLDER  # an ended process of this host holds nothing
    finally:
        os.close(fd)


def test_the_timeout_is_still_a_timeout_error_for_python_callers(tmp_path, holder):
    proc = holder(60)
    with pytest.raises(TimeoutError, match=f"held by pid {proc.pid}"), locking.launch_lock(tmp_path, timeout_s=0.2):
        pass


# ------------------------------------------------------------------------------------ 3. environment variables


@pytest.fixture()
def odd_paths(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    small = tmp_path / "file"
    small.write_text("x\n")
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(2 * 1024 ** 3)  # a 2 GB file, sparse
    return {"fifo": (fifo, "is a FIFO, not a directory"), "file": (small, "is a file of 2 bytes, not a directory"),
            "big": (big, "is a file of 2,147,483,648 bytes, not a directory"),
            "missing": (tmp_path / "missing", "does not exist")}


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_exoformer_cache_that_is_no_directory_is_named(tmp_path, capsys, monkeypatch, odd_paths, kind, fake_stages):
    path, what = odd_paths[kind]
    monkeypatch.setenv("EXOFORMER_CACHE", str(path))
    code = main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path / "runs"), "--backend", "inline"])
    err = _one_line(capsys, code, f"$EXOFORMER_CACHE: {path} {what}", "(fix: unset it")
    assert "runs root" not in err, err


@pytest.mark.parametrize("kind", ["fifo", "big", "missing"])
def test_exoformer_profiles_that_is_no_directory_is_named(tmp_path, capsys, monkeypatch, odd_paths, kind):
    path, what = odd_paths[kind]
    monkeypatch.setenv("EXOFORMER_PROFILES", str(path))
    err = _one_line(capsys, main(["plan", "base-s42", "--runs-dir", str(tmp_path / "runs")]),
                    f"$EXOFORMER_PROFILES: {path} {what}", "(fix: unset it")
    assert "unknown profile" not in err and "valid choices" not in err, err


def test_exoformer_registry_that_is_a_fifo_is_named(tmp_path, capsys, monkeypatch, odd_paths):
    path, what = odd_paths["fifo"]
    monkeypatch.setenv("EXOFORMER_REGISTRY", str(path))
    _one_line(capsys, main(["plan", "base-s42", "--runs-dir", str(tmp_path / "runs")]),
              f"$EXOFORMER_REGISTRY: {path} {what}", "(fix: unset it")


def test_the_data_and_task_directories_name_their_variables(monkeypatch, odd_paths):
    from exoformer.data import resolve_data
    from exoformer.eval.run import evaluate

    path, what = odd_paths["fifo"]
    monkeypatch.setenv("EXOFORMER_DATA_DIR", str(path))
    with pytest.raises(UserError, match=r"^\$EXOFORMER_DATA_DIR: .* is a FIFO, not a directory \(fix: ") as err:
        resolve_data("fineweb-edu-10b")
    assert str(path) in str(err.value)
    monkeypatch.setenv("EXOFORMER_TASK_DIR", str(path))
    with pytest.raises(UserError, match=r"^\$EXOFORMER_TASK_DIR: .* is a FIFO, not a directory \(fix: .*prefetch"):
        evaluate(None, None, "paper")
    monkeypatch.setenv("EXOFORMER_CACHE", str(odd_paths["file"][0]))
    monkeypatch.delenv("EXOFORMER_TASK_DIR")
    with pytest.raises(UserError, match=r"^\$EXOFORMER_CACHE: .* is a file of 2 bytes"):
        evaluate(None, None, "smoke")


def test_directories_that_exist_are_taken_as_they_are(tmp_path, monkeypatch):
    from exoformer.data import cache_dir
    from exoformer.registry.profiles import list_profiles

    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path / "not-yet"))  # the cache is created when missing
    assert cache_dir() == tmp_path / "not-yet"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "mine.yaml").write_text("description: x\n")
    monkeypatch.setenv("EXOFORMER_PROFILES", str(tmp_path / "profiles"))
    assert list_profiles() == ["mine"]
