"""One test per fault of the fourth adversarial round (docs/input-limits.md; exoformer/runs/verify.py): writes go
only into real directories of the run, every file a verdict reads is verified, profile fields and numeric options
are bounded, and outputs, checkpoint metadata, weights, the dataset cache and time limits end in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.tables import TASKS
from exoformer.rundir import RunDir, index_file
from exoformer.runs.run_index import find_runs, one_view

REPO = Path(__file__).resolve().parents[2]
from synthetic import make_run, registry  # noqa: E402

N_DOCS = 20


def _finished(root: Path, spec: str = "base-s42", *, acc: float = 0.5, preset: str = "smoke") -> RunDir:
    """A finished synthetic run with result rows, per-sample results and the stage records that wrote them."""
    run = RunDir(make_run(root, spec, preset=preset, accuracies={t: acc for t in TASKS},
                          curve=[(1000.0 * i, 5.0 - 0.1 * i) for i in range(1, 5)]))
    ones = round(acc * N_DOCS)
    rows = [{**json.loads(line), "n": N_DOCS, "value": ones / N_DOCS} for line in
            run.eval_rows.read_text().splitlines()]
    run.write_rows(run.eval_rows, rows)
    values = [1.0 if i < ones else 0.0 for i in range(N_DOCS)]
    tasks = {r["task"]: {"doc_id": list(range(N_DOCS))} for r in rows}
    for r in rows:
        tasks[r["task"]][r["metric"]] = values
    (run.eval_dir / "samples.json").write_text(json.dumps({"format": 1, "tasks": tasks}))
    run.record_stage("evaluate", {"stage": "evaluate", "result": {
        "suite": "smoke", "metrics": {f"{r['task']}/{r['metric']}": r["value"] for r in rows}}})
    return run


def _state(root: Path, run: RunDir) -> tuple[str | None, str | None]:
    with one_view():
        info = next(i for i in find_runs(root) if i.path == run.path)
    return info.state, info.damage


# ------------------------------------------------------------------------------------------ 1. writes

@pytest.mark.parametrize("sub", ["checkpoints", "eval", "logs"])
def test_a_run_folder_that_is_a_symlink_is_refused_before_anything_is_written(tmp_path, sub, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "step_00000001.pt").write_bytes(b"theirs")
    spec = registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])
    run = RunDir(tmp_path / "runs" / spec.name / spec.hash12)
    run.path.mkdir(parents=True)
    (run.path / sub).symlink_to(elsewhere)
    code = main(["run", "base-s42", "--preset", "smoke", "--set", "train.steps=2", "--backend", "inline",
                 "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "symbolic link" in err, err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["step_00000001.pt"]
    assert (elsewhere / "step_00000001.pt").read_bytes() == b"theirs"
    assert not run.status_file.exists() and not run.spec_file.exists()


def test_checkpoint_retention_never_deletes_through_a_linked_run_directory(tmp_path):
    import torch

    from exoformer.train.checkpoint import save_checkpoint

    victim = tmp_path / "victim" / "checkpoints"  # another run's checkpoints, each verified
    victim.mkdir(parents=True)
    for step in (1, 2, 3):
        save_checkpoint(victim, step, {"w": torch.zeros(1)}, keep=5)
    before = sorted(p.name for p in victim.iterdir())
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run").symlink_to(tmp_path / "victim")  # a run directory created first, as a link
    with pytest.raises(UserError, match="symbolic link"):
        save_checkpoint(tmp_path / "runs" / "run" / "checkpoints", 4, {"w": torch.zeros(1)}, keep=1)
    assert sorted(p.name for p in victim.iterdir()) == before


def test_checkpoint_retention_deletes_only_regular_files_of_its_own_folder(tmp_path):
    import torch

    from exoformer.train.checkpoint import save_checkpoint

    theirs = tmp_path / "theirs.pt"
    theirs.write_bytes(b"not ours")
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "step_00000001.pt").symlink_to(theirs)  # a link placed among the checkpoints, named like one
    (folder / "step_00000001.pt.sha256").write_text("0" * 64 + "  step_00000001.pt\n")
    for step in (2, 3, 4):
        save_checkpoint(folder, step, {"w": torch.zeros(1)}, keep=1)
    assert theirs.read_bytes() == b"not ours" and (folder / "step_00000001.pt").is_symlink()
    assert (folder / "step_00000004.pt").is_file() and not (folder / "step_00000002.pt").exists()


def test_a_checkpoint_folder_that_is_a_symlink_is_refused(tmp_path):
    import torch

    from exoformer.train.checkpoint import save_checkpoint

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").symlink_to(elsewhere)
    with pytest.raises(UserError, match="symbolic link"):
        save_checkpoint(tmp_path / "run" / "checkpoints", 1, {"w": torch.zeros(1)}, keep=1)
    assert not any(elsewhere.iterdir())


def test_status_reads_and_writes_no_index_through_a_symlink(tmp_path, capsys):
    """The old in-root `.index` is never read or written; the index folder in the user's cache, when a symbolic
    link, is neither read nor written through (the runs are read from their files)."""
    root = tmp_path / "runs"
    _finished(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "base-s42.json").write_text("theirs")
    (root / ".index").symlink_to(elsewhere)
    folder = index_file(root, "base-s42").parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.symlink_to(elsewhere)
    assert main(["status", "--runs-dir", str(root)]) == 0, capsys.readouterr().err
    assert (elsewhere / "base-s42.json").read_text() == "theirs" and len(list(elsewhere.iterdir())) == 1


# ------------------------------------------------------------------------------------------ 2. verified reads

def test_a_finished_run_reads_succeeded_with_its_files_intact(tmp_path):
    run = _finished(tmp_path)
    assert _state(tmp_path, run) == ("SUCCEEDED", None)


@pytest.mark.parametrize("value", [float("nan"), 1e309, 7.0])
def test_samples_not_finite_or_out_of_range_make_the_run_damaged(tmp_path, value):
    run = _finished(tmp_path)
    path = run.eval_dir / "samples.json"
    data = json.loads(path.read_text())
    next(iter(data["tasks"].values()))["acc"][0] = value
    path.write_text(json.dumps(data))
    state, damage = _state(tmp_path, run)
    assert state == "DAMAGED" and "samples.json" in damage, damage


def test_samples_that_disagree_with_the_rows_make_the_run_damaged(tmp_path):
    run = _finished(tmp_path, acc=0.5)
    path = run.eval_dir / "samples.json"
    data = json.loads(path.read_text())
    for body in data["tasks"].values():  # every document right: a +50 point "gain" the rows never had
        body["acc"] = [1.0] * len(body["doc_id"])
    path.write_text(json.dumps(data))
    state, damage = _state(tmp_path, run)
    assert state == "DAMAGED" and "averages 1.000000" in damage, damage


def test_malformed_samples_are_damage_and_never_crash_the_bootstrap(tmp_path):
    from exoformer.eval.samples import read_samples

    run = _finished(tmp_path)
    path = run.eval_dir / "samples.json"
    data = json.loads(path.read_text())
    next(iter(data["tasks"].values()))["acc"].pop()  # one value short of the documents
    path.write_text(json.dumps(data))
    assert read_samples(run.path) is None
    state, damage = _state(tmp_path, run)
    assert state == "DAMAGED" and "one value per document" in damage, damage


def test_an_identity_of_a_seed_override_reads_as_recorded(tmp_path):
    run = RunDir(make_run(tmp_path, "base-s42", preset="450m", overrides=("seed=7",),
                          accuracies={t: 0.5 for t in TASKS}))
    assert _state(tmp_path, run) == ("SUCCEEDED", None)


def test_a_damaged_metrics_line_marks_the_run_and_the_figure_with_its_line_number(tmp_path):
    run = _finished(tmp_path)
    lines = run.metrics_file.read_text().splitlines()
    lines[1] = lines[1][:10]  # a line torn in the middle of the file, not a crash while appending
    run.metrics_file.write_text("\n".join(lines) + "\n")
    state, damage = _state(tmp_path, run)
    assert state == "DAMAGED" and "metrics.jsonl:2" in damage, damage
    problems: list[str] = []
    tokens, _ = run.val_curve(problems=problems)
    assert len(tokens) == 3 and problems and "metrics.jsonl:2" in problems[0]


def test_a_loss_curve_figure_names_the_damaged_metrics_line(tmp_path, monkeypatch):
    from exoformer.report.figures import draw as figures

    run = _finished(tmp_path)
    lines = run.metrics_file.read_text().splitlines()
    lines[1] = "{not json"
    run.metrics_file.write_text("\n".join(lines) + "\n")
    notes: list[str] = []
    monkeypatch.setattr(figures, "add_below", lambda fig, text, **kw: notes.append(text))
    from exoformer.report.reading.selection import Selection

    reg = registry()
    figures.plot_curves(Selection.of_root(reg, tmp_path), reg.figures["val-loss-table1"],
                        [("base-s42", "Base", run.path)], tmp_path / "out")
    assert any("metrics.jsonl:2" in note for note in notes), notes


def test_an_in_place_edit_of_the_same_size_with_its_mtime_restored_is_seen(tmp_path):
    run = _finished(tmp_path, acc=0.5)
    assert _state(tmp_path, run) == ("SUCCEEDED", None)
    st = os.stat(run.eval_rows)
    text = run.eval_rows.read_text()
    edited = text.replace('"value": 0.5', '"value": 0.9', 1)
    assert len(edited) == len(text) and edited != text
    run.eval_rows.write_text(edited)
    os.utime(run.eval_rows, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(run.eval_rows).st_mtime_ns == st.st_mtime_ns
    state, damage = _state(tmp_path, run)
    assert state == "DAMAGED" and "0.9" in damage, damage


def test_the_index_key_holds_the_inode_change_time(tmp_path):
    from exoformer.runs import verify

    path = tmp_path / "f"
    path.write_text("a")
    before = verify.file_stamp(path)
    st = os.stat(path)
    path.write_text("b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = verify.file_stamp(path)
    assert before[:2] == after[:2] and before != after


# ------------------------------------------------------------------------------------------ 3. regular files

@pytest.mark.parametrize("name", ["STATUS", "identity.json", "provenance.json", "metrics.jsonl", "spec.yaml"])
def test_a_fifo_in_a_run_directory_never_blocks_a_reading_verb(tmp_path, name):
    root = tmp_path / "runs"
    run = _finished(root)
    getattr(run, {"STATUS": "status_file", "identity.json": "identity_file", "provenance.json": "provenance_file",
                  "metrics.jsonl": "metrics_file", "spec.yaml": "spec_file"}[name]).unlink()
    os.mkfifo(run.path / name)
    env = {**os.environ, "PYTHONPATH": str(REPO), "EXOFORMER_RUNS_DIR": str(root)}
    for argv in (["status"], ["table", "table1", "--preset", "smoke"], ["plan", "base-s42", "--preset", "smoke"]):
        done = subprocess.run([sys.executable, str(REPO / "reproduce.py"), *argv], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode in (0, 2) and "Traceback" not in done.stderr, (argv, done.stderr)
        assert done.returncode == 0 or done.stderr.count("error:") == 1, (argv, done.stderr)


def test_the_lowest_reader_refuses_fifos_links_directories_and_huge_files(tmp_path):
    from exoformer.io import NotRegularFile, read_regular

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    with open(tmp_path / "huge", "wb") as f:
        f.truncate(1 << 30)
    for name in ("fifo", "dir", "link", "huge"):
        with pytest.raises(NotRegularFile):
            read_regular(tmp_path / name)
    assert read_regular(tmp_path / "file") == b"x"


# ------------------------------------------------------------------------------------------ 4. bounds

def test_bootstrap_is_bounded(capsys):
    assert main(["claims", "--bootstrap", "1000000000"]) == 2
    assert "--bootstrap" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--jobs", "100000"], ["--threads", "5000"], ["--timeout-min", "1e300"]])
def test_launch_options_are_bounded(argv, capsys):
    assert main(["run", "base-s42", "--preset", "smoke", "--dry-run", *argv]) == 2
    assert argv[0] in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value"), [
    ("nodes", 0), ("gpus_per_node", 0), ("gpus_per_node", -8), ("signal_delay_s", -5), ("array_parallelism", 0),
    ("cpus_per_task", -1), ("max_requeues", -1), ("time_min", 10 ** 9), ("signal_delay_s", 200000),
])
def test_every_profile_field_is_bounded_on_load_and_by_validate(tmp_path, monkeypatch, field, value, capsys):
    for other in (REPO / "slurm" / "profiles").glob("*.yaml"):
        (tmp_path / other.name).write_text(other.read_text())
    text = (REPO / "slurm" / "profiles" / "h100.yaml").read_text()
    lines = [f"  {field}: {value}" if line.strip().startswith(f"{field}:") else line for line in text.splitlines()]
    (tmp_path / "h100.yaml").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("EXOFORMER_PROFILES", str(tmp_path))
    from exoformer.registry.profiles import load_profile

    with pytest.raises(UserError, match=field):
        load_profile("h100")
    assert main(["validate"]) == 2
    assert field in capsys.readouterr().err


def test_a_cpu_profile_with_gpus_is_refused(tmp_path, monkeypatch):
    text = (REPO / "slurm" / "profiles" / "cpu.yaml").read_text().replace("gpus_per_node: 0", "gpus_per_node: 4")
    (tmp_path / "cpu.yaml").write_text(text)
    monkeypatch.setenv("EXOFORMER_PROFILES", str(tmp_path))
    from exoformer.registry.profiles import load_profile

    with pytest.raises(UserError, match="CPU profile"):
        load_profile("cpu")


# ------------------------------------------------------------------------------------------ 5. one line

@pytest.mark.parametrize("out", ["/proc/self", "/sys/kernel"])
def test_an_output_that_cannot_be_written_is_one_line(tmp_path, out, capsys):
    root = tmp_path / "runs"
    _finished(root)
    assert main(["table", "table1", "--preset", "smoke", "--runs-dir", str(root), "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "cannot write the output" in err, err


def test_a_full_disk_under_the_report_is_one_line(tmp_path, monkeypatch, capsys):
    import errno
    import tempfile

    root = tmp_path / "runs"
    _finished(root)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "x"))

    monkeypatch.setattr(tempfile, "mkstemp", full)
    assert main(["table", "table1", "--preset", "smoke", "--runs-dir", str(root), "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "disk is full" in err and "--out" in err, err


def _our_checkpoint(tmp_path: Path, **changes) -> Path:
    import torch

    from exoformer.model import ExoTransformer

    spec = registry().resolve("base-s42", preset="smoke", overrides=["model.n_layer=2"])
    model = ExoTransformer(spec.model)
    state = {"model": model.state_dict(), "model_config": spec.model.to_dict(), "train_config": spec.train.to_dict(),
             "step": 3, "tokens": 3000}
    state.update(changes)
    path = tmp_path / "ckpt.pt"
    torch.save(state, path)
    return path


def test_a_checkpoint_declaring_nan_tokens_is_one_line(tmp_path):
    from exoformer.model.official_info import describe_checkpoint

    path = _our_checkpoint(tmp_path, tokens=float("nan"))
    with pytest.raises(UserError, match="tokens = nan"):
        describe_checkpoint(path)


@pytest.mark.parametrize("dtype", ["int64", "bool", "complex64"])
def test_weights_of_a_dtype_no_model_has_are_refused_with_the_tensor_name(dtype):
    import torch

    from exoformer.model.loading import check_tensor_shapes, expected_shapes

    config = registry().resolve("base-s42", preset="smoke", overrides=["model.n_layer=2"]).model
    state = {name: torch.zeros(shape, device="meta") for name, shape in expected_shapes(config).items()}
    victim = sorted(state)[0]
    state[victim] = torch.zeros(state[victim].shape, dtype=getattr(torch, dtype), device="meta")
    with pytest.raises(UserError, match=f"tensor {victim} has dtype {dtype}"):
        check_tensor_shapes(state, config, where="ckpt.pt")


# ------------------------------------------------------------------------------------------ 6. recovery

def test_a_damaged_arrow_cache_names_the_cache_and_how_to_rebuild_it(tmp_path):
    sys.path.insert(0, str(REPO / "tests" / "eval"))
    from eval_fakes import CharTokenizer, TinyCausalLM

    from exoformer.eval.run import evaluate

    cache = tmp_path / "hf"
    model = TinyCausalLM(seq_len=1024)
    evaluate(model, CharTokenizer(), "smoke", limit=2, batch_size=16, num_fewshot=0, cache_dir=cache)
    for arrow in cache.rglob("*.arrow"):
        arrow.write_bytes(b"garbage")
    with pytest.raises(UserError) as err:
        evaluate(model, CharTokenizer(), "smoke", limit=2, batch_size=16, num_fewshot=0, cache_dir=cache)
    assert str(cache / "datasets") in str(err.value) and "rm -rf" in err.value.fix


def test_a_stale_temp_file_in_the_index_is_removed(tmp_path):
    run = _finished(tmp_path)
    _state(tmp_path, run)
    folder = index_file(tmp_path, "base-s42").parent
    stale = folder / ".base-s42.json.abcd1234.tmp"
    stale.write_text("{")
    os.utime(stale, (1, 1))
    fresh = folder / ".base-s42.json.efgh5678.tmp"
    fresh.write_text("{")  # a writer killed a moment ago: no process holds the folder's lock, so it goes too
    run.status_file.write_text(run.status_file.read_text())  # something changed: the index is written again
    _state(tmp_path, run)
    assert not stale.exists() and not fresh.exists()  # a live writer's: tests/runs/test_index_trust.py


def test_a_time_limit_signal_inside_a_stage_is_requeued_not_failed(tmp_path, monkeypatch, fake_stages, smoke_spec):
    from exoformer.runs import pipeline, rundirs

    def stopped(ctx):
        raise SystemExit(144)  # submitit's requeue exit, from its handler of the time-limit signal

    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "train", stopped)
    run_dir = rundirs.prepare(smoke_spec, tmp_path / smoke_spec.name / smoke_spec.hash12)
    with pytest.raises(SystemExit):
        pipeline.run_pipeline(run_dir, smoke_spec, backend="local", echo=False)
    status = RunDir(run_dir).read_status()
    assert status.state == "PENDING" and "stopped by a signal" in status.reason, status


def test_a_job_that_timed_out_too_often_reads_timed_out(tmp_path, monkeypatch, fake_stages, smoke_spec):
    from submitit.core.utils import UncompletedJobError

    from exoformer.runs import pipeline, rundirs

    def stopped(ctx):
        raise UncompletedJobError("Job not requeued because: timed-out too many times.")

    monkeypatch.setitem(pipeline.STAGE_FUNCTIONS, "train", stopped)
    run_dir = rundirs.prepare(smoke_spec, tmp_path / smoke_spec.name / smoke_spec.hash12)
    with pytest.raises(UncompletedJobError):
        pipeline.run_pipeline(run_dir, smoke_spec, backend="local", echo=False)
    status = RunDir(run_dir).read_status()
    assert status.state == "INTERRUPTED" and status.reason.startswith("timed out during train"), status
