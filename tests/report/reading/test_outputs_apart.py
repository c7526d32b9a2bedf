"""Outputs never touch inputs: `report`, `table --out` and `figure --out` refuse an output directory that is,
contains or lies inside a runs root or a registry; a report copies only regular files inside their run."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest


from synthetic import make_run, uniform

from exoformer.cli import main
from exoformer.registry.registry import DEFAULT_REGISTRY
from exoformer.rundir import RunDir

BIG = 300_000


def _runs(root: Path) -> Path:
    run = make_run(root, "base-s42", preset="smoke", accuracies=uniform(0.3), task_prefix="smoke_")
    RunDir(run).logs.mkdir(parents=True, exist_ok=True)
    (RunDir(run).logs / "attempt-001.log").write_bytes(b"x" * BIG)
    return run


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("verb", [["report", "table1"], ["table", "table1"], ["figure", "val-loss-table1"]])
@pytest.mark.parametrize("where", ["parent", "same", "inside"])
def test_an_output_directory_overlapping_the_runs_root_is_refused(tmp_path, capsys, verb, where):
    root = tmp_path / "D" / "runs"
    _runs(root)
    before = _snapshot(tmp_path)
    out = {"parent": tmp_path / "D", "same": root, "inside": root / "base-s42"}[where]
    code = main([*verb, "--preset", "smoke", "--runs-dir", str(root), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --out: the output directory") and err.count("\n") == 1, err
    assert "runs root" in err
    assert _snapshot(tmp_path) == before  # not a byte changed, no log cut to its tail


def test_the_default_runs_root_and_the_registry_are_inputs_too(tmp_path, capsys, monkeypatch):
    root = tmp_path / "runs"
    _runs(root)
    monkeypatch.setenv("EXOFORMER_RUNS_DIR", str(root))
    for out in (tmp_path, DEFAULT_REGISTRY, DEFAULT_REGISTRY.parent):
        assert main(["report", "table1", "--preset", "smoke", "--out", str(out)]) == 2
        assert "error: --out: the output directory" in capsys.readouterr().err
    link = tmp_path / "alias"
    link.symlink_to(root)  # a symlink to the runs root is the runs root
    assert main(["table", "table1", "--preset", "smoke", "--out", str(link / "t")]) == 2
    assert "lies inside the runs root" in capsys.readouterr().err


def test_a_report_never_follows_a_link_out_of_its_run(tmp_path, capsys):
    root = tmp_path / "runs"
    run = RunDir(_runs(root))
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    (run.logs / "zz.log").symlink_to(secret)
    (run.logs / "inner.log").symlink_to(run.logs / "attempt-001.log")  # a link that stays inside is fine
    os.mkfifo(run.logs / "pipe.log")  # never opened (it would block)
    done = threading.Event()
    code: list[int] = []

    def build() -> None:
        code.append(main(["report", "table1", "--preset", "smoke", "--runs-dir", str(root), "--out",
                          str(tmp_path / "report")]))
        done.set()

    worker = threading.Thread(target=build, daemon=True)
    worker.start()
    assert done.wait(120), "the report blocked on a FIFO in logs/"
    capsys.readouterr()
    assert code == [0]
    copied = tmp_path / "report" / "runs" / "base-s42"
    texts = [p.read_bytes() for p in copied.rglob("*") if p.is_file()]
    assert texts and not any(b"TOP-SECRET" in t for t in texts)
    assert b"TOP-SECRET" not in (tmp_path / "report" / "index.html").read_bytes()
    assert not list(copied.rglob("zz.log")) and not list(copied.rglob("pipe.log"))
    assert list(copied.rglob("inner.log"))


def test_is_run_file_rules(tmp_path):
    from exoformer.report.reading import outputs

    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "a.log").write_text("a")
    (run / "logs" / "up.log").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("b")
    assert outputs.is_run_file(run / "logs" / "a.log", run)
    assert not outputs.is_run_file(run / "logs" / "up.log", run)
    assert not outputs.is_run_file(run / "logs", run)
    assert not outputs.is_run_file(run / "logs" / "missing.log", run)
