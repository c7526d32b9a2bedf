"""Each of these faults ends in exit 2 and one `error:` line (never a traceback), or in a correct answer: a full
disk under the launcher, a read-only root, an over-long runs root, STATUS or .launch.lock a directory, NaN or
infinite intervals and time limits, registry files that must not get past `validate`, and table cells that
must be escaped."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
import yaml

from exoformer.cli import main
from exoformer.runs import rundirs as runs, status
from exoformer.registry.registry import DEFAULT_REGISTRY
from exoformer.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
TINY = ["--preset", "smoke", "--set", "train.steps=2"]


@pytest.fixture(scope="module")
def spec(smoke_spec):
    return smoke_spec


def _one_line(capsys, code: int, *pieces: str) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (code, err)
    assert "Traceback" not in err
    for piece in pieces:
        assert piece in err, (piece, err)
    return err


def test_a_full_disk_under_the_launcher_is_one_line_and_nothing_is_left_queued(tmp_path, capsys, monkeypatch, spec,
                                                                             fake_stages):
    real = RunDir.write_status

    def full(self, status_):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.status_file))

    monkeypatch.setattr(RunDir, "write_status", full)
    argv = ["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"]
    _one_line(capsys, main(argv), "No space left on device", "run the same command again")
    monkeypatch.setattr(RunDir, "write_status", real)
    assert main(argv) == 0  # the fix: the same command, once there is space
    assert runs.read_status(runs.run_dir_for(spec, tmp_path)).state == runs.SUCCEEDED


def test_status_on_a_read_only_root_with_a_stale_running_run(tmp_path, capsys, monkeypatch, spec):
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    RunDir(run_dir).write_status(runs.Status(state=runs.RUNNING, backend="inline", stage="train"))

    def read_only(self, status_):
        raise OSError(errno.EROFS, "Read-only file system", str(self.status_file))

    monkeypatch.setattr(RunDir, "write_status", read_only)
    code = main(["status", "--runs-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "INTERRUPTED" in out and code == 0, (code, out, err)
    assert runs.read_status(run_dir).state == runs.RUNNING  # nothing could be written, nothing was


@pytest.mark.parametrize("verb", [["run", "base-s42", *TINY, "--backend", "inline"], ["plan", "base-s42", *TINY]])
def test_an_over_long_runs_root_is_one_line(tmp_path, capsys, verb):
    root = str(tmp_path) + "/" + "/".join(["d" * 200] * 20)
    root = root[:4045]
    _one_line(capsys, main([*verb, "--runs-dir", root]), "bytes long")


def test_status_a_directory_is_one_line(tmp_path, capsys, spec, fake_stages):
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    RunDir(run_dir).status_file.mkdir()
    _one_line(capsys, main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"]),
              "STATUS", "is a directory")
    assert RunDir(run_dir).status_file.is_dir()  # left as it was


def test_the_launch_lock_a_directory_is_one_line(tmp_path, capsys, fake_stages):
    (tmp_path / ".launch.lock").mkdir()
    _one_line(capsys, main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "inline"]),
              ".launch.lock")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0"])
def test_watch_interval_must_be_a_finite_positive_number(tmp_path, capsys, value):
    _one_line(capsys, main(["status", "--watch", "--interval", value, "--runs-dir", str(tmp_path)]), "--interval")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_timeout_must_be_a_finite_positive_number(tmp_path, capsys, value):
    _one_line(capsys, main(["run", "base-s42", *TINY, "--runs-dir", str(tmp_path), "--backend", "local",
                            "--timeout-min", value]), "--timeout-min")


def _registry(tmp_path: Path, text: str) -> Path:
    reg = tmp_path / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, reg)
    (reg / "registry.yaml").write_text((reg / "registry.yaml").read_text().rstrip() + "\n  - bad.yaml\n")
    (reg / "bad.yaml").write_text(text)
    return reg


BAD_REGISTRY = {
    "include-nul": ('include: ["a\\0b.yaml"]\n', "bad.yaml:1"),
    "include-long": (f"include: [{'a' * 5000}.yaml]\n", "bad.yaml:1"),
    "profile-path": ("groups:\n  bad:\n    why: x\n    specs:\n      bad-a:\n        variant: base\n"
                     "        placement: {profile: ../../../etc/passwd}\n", "bad.yaml:7"),
    "duplicate-columns": ("tables:\n  bad:\n    title: t\n    columns: [val_ppl, val_ppl]\n"
                          "    rows:\n      - {id: base, label: B, specs: [base-s42]}\n", "bad.yaml:4"),
    "description-list": ("metrics:\n  bad_metric: {description: [a, b], better: lower}\n", "bad.yaml:2"),
}


@pytest.mark.parametrize("case", sorted(BAD_REGISTRY))
def test_validate_refuses_with_file_and_line(tmp_path, capsys, case):
    text, where = BAD_REGISTRY[case]
    reg = _registry(tmp_path, text)
    _one_line(capsys, main(["validate", "--registry", str(reg)]), where)


def test_latex_and_markdown_cells_are_escaped(tmp_path, capsys, monkeypatch):
    from exoformer.report.tables.build import _latex_escape, _md_escape

    assert _latex_escape("x^2 ~ y") == r"x\textasciicircum{}2 \textasciitilde{} y"
    assert _md_escape("a | b") == r"a \| b"
    text = ("tables:\n  esc:\n    title: t\n    columns: [val_ppl]\n"
            "    rows:\n      - {id: base, label: \"A | x^2 ~y\", specs: [base-s42]}\n")
    reg = _registry(tmp_path, text)
    reported = yaml.safe_load((REPO / "results" / "paper" / "reported.yaml").read_text())
    reported["tables"]["esc"] = {"base": {"val_ppl": {"value": None, "reason": "test"}}}
    (tmp_path / "reported.yaml").write_text(yaml.safe_dump(reported))
    monkeypatch.setenv("EXOFORMER_REPORTED", str(tmp_path / "reported.yaml"))
    (tmp_path / "runs").mkdir()
    common = ["esc", "--registry", str(reg), "--runs-dir", str(tmp_path / "runs"), "--preset", "smoke"]
    assert main(["table", *common, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert r"| A \| x^2 ~y |" in md, md
    assert main(["table", *common, "--format", "latex"]) == 0
    tex = capsys.readouterr().out
    assert r"A | x\textasciicircum{}2 \textasciitilde{}y" in tex, tex


def test_reconcile_never_writes_on_a_read_only_root_even_for_never_started_runs(tmp_path, spec, monkeypatch):
    run_dir = runs.prepare(spec, runs.run_dir_for(spec, tmp_path))
    RunDir(run_dir).write_status(runs.Status(state=runs.PENDING, backend="inline", reason="queued by run"))
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: (_ for _ in ()).throw(
        OSError(errno.EROFS, "Read-only file system")))
    assert status.reconcile(run_dir, None, status.SlurmView()) is None
