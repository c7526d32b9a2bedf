"""Checkpoints that survive being killed at any moment, and results read only from a verified final one.

One file per checkpoint, `checkpoints/step_00001234.pt` (the step = updates done), written to a temp file
in the same directory, fsynced, hashed and renamed; then a `step_00001234.pt.sha256` side-car is written
the same way. A checkpoint counts only when its side-car exists and matches: resuming skips a torn or
partial file with a warning and uses the previous one, and retention keeps the newest `keep` *verified*
checkpoints (a damaged file never pushes a good one out).

Results (final validation, evaluation, analysis) come only from `load_final_checkpoint`: the checkpoint
of the run's last step, verified, or a UserError naming the file; never an earlier step.

Cost at paper scale (~5 GB states): a load hashes the open file in one streaming pass and torch.loads
the same open file (the second read comes from the page cache; memory stays one state). A verdict on an
unchanged file (same size, mtime, inode and side-car) is remembered for the process, so a file is hashed
at most once per process: listing checkpoints after a save or a load, or loading it again, hashes nothing.
Loading uses torch.load(weights_only=True).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from exoformer.errors import UserError
from exoformer.faults import MACHINE_ERRNOS, ResumableFault, check_run_dir
from exoformer.io import atomic_write_text, check_real_directories, fsync_dir, sha256_file, sha256_of
from exoformer.rundir import RunDir, checkpoint_name, run_dirs_of_spec
from exoformer.train.distributed import working_alone

NAME = re.compile(r"^step_(\d{8,})\.pt$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")

RESUME_TOLERANT_FIELDS = frozenset({"compile", "checkpoint_every", "keep_checkpoints", "final_val_tokens",
                                    "keep_every"})
"""TrainConfig fields that may change between a checkpoint and its resumption (they never change the math)."""

_VERDICTS: dict[tuple, str | None] = {}
"""(path, size, mtime, inode, side-car digest) -> None (verified) or the reason it is not; per process."""


def checkpoint_dir(run_or_checkpoint_dir: str | os.PathLike) -> Path:
    """`<run>/checkpoints` for a run directory, else the directory itself."""
    path = Path(run_or_checkpoint_dir)
    inside = RunDir(path).checkpoints
    return inside if inside.is_dir() or not _checkpoints(path) else path


def _recorded_digest(path: Path) -> tuple[str | None, str | None]:
    """(digest in the side-car, None) or (None, why there is no usable one)."""
    sidecar = Path(f"{path}.sha256")
    try:
        text = sidecar.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None, "no checksum side-car (partial write)"
    except OSError as error:
        return None, f"unreadable checksum side-car ({error.strerror or error})"
    fields = text.split()
    if not fields or not HEX64.match(fields[0].lower()):
        return None, f"malformed checksum side-car {sidecar.name} (expected '<64 hex>  {path.name}')"
    return fields[0].lower(), None


def _key(path: Path, digest: str) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, digest)


def _remember(path: Path, digest: str, verdict: str | None) -> None:
    key = _key(path, digest)
    if key is not None:
        _VERDICTS[key] = verdict


def _mismatch(expected: str, actual: str) -> str:
    return f"checksum mismatch (expected {expected[:12]}, got {actual[:12]}): the file is damaged or truncated"


def verify(path: str | os.PathLike) -> str | None:
    """None when the checkpoint is complete and matches its side-car checksum, else the reason it is not.

    Hashes the file at most once per process while it stays unchanged (same size, mtime, inode, side-car).
    """
    path = Path(path)
    expected, problem = _recorded_digest(path)
    if problem:
        return problem
    key = _key(path, expected)
    if key is None:
        return "file missing"
    if key in _VERDICTS:
        return _VERDICTS[key]
    try:
        actual = sha256_file(path)
    except OSError as error:
        return f"unreadable ({error.strerror or error})"
    verdict = None if actual == expected else _mismatch(expected, actual)
    _VERDICTS[key] = verdict
    return verdict


def save_checkpoint(directory: str | os.PathLike, step: int, state: dict[str, Any], *, keep: int,
                    keep_every: int | None = None) -> Path:
    """Write `state` as checkpoint `step` atomically with its checksum; keep the newest `keep` verified ones, and
    every one at a multiple of `keep_every` (a ladder's branch points), which never counts towards `keep`.

    A write that fails (disk full, read-only directory, quota) is a UserError naming the path; the
    checkpoints already there are left untouched.
    """
    directory = Path(directory)
    path = directory / checkpoint_name(step)
    fix = "free space on that disk (or raise the quota) and run the same command again to resume"
    check_run_dir(directory.parent)  # a run directory removed under its job is not recreated here
    check_real_directories([directory.parent, directory], fix="move it away (nothing was written or deleted); "
                                                              "checkpoints go into a folder the job creates")
    with working_alone(f"saving checkpoint step {step}"):  # the other ranks wait for it, however long it takes
        _write(directory, path, step, state, fix)
    _prune(directory, keep, keep_every)
    return path


def _write(directory: Path, path: Path, step: int, state: dict[str, Any], fix: str) -> None:
    """save_checkpoint's write: temp file, fsync, hash, rename, side-car."""
    tmp: str | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        digest = sha256_file(Path(tmp))
        check_run_dir(directory.parent)
        os.replace(tmp, path)
        tmp = None
        fsync_dir(directory)
        try:
            atomic_write_text(f"{path}.sha256", f"{digest}  {path.name}\n")
        except BaseException:
            path.unlink(missing_ok=True)  # without its side-car it would never count anyway
            raise
    except (OSError, RuntimeError) as error:  # torch reports a failed write as RuntimeError (inline_container)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
        # a full disk, a quota, a read-only or failing device (torch reports them as RuntimeError) is resumable
        machine = not isinstance(error, OSError) or error.errno in MACHINE_ERRNOS
        kind = ResumableFault if machine else UserError
        raise kind(f"cannot write checkpoint step {step} ({type(error).__name__}: {reason[:160]}); "
                   "the previous checkpoints are intact", where=str(path),
                   fix=fix if machine else "fix the path or its permissions, then run the same command with "
                                           "--retry-failed"
                   ) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    _remember(path, digest, None)


def _prune(directory: Path, keep: int, keep_every: int | None = None) -> None:
    """Delete checkpoints older than the newest `keep` verified ones (damaged ones among them too), except those
    at a multiple of `keep_every`, which are neither deleted nor counted.

    Damaged files newer than the newest verified one are left alone (they are skipped on resume and
    replaced when training reaches their step again), so they never push a good checkpoint out.
    """
    verified = 0
    for old in _checkpoints(directory):
        if keep_every and int(NAME.match(old.name).group(1)) % keep_every == 0:
            continue
        if verified >= keep:
            for path in (old, Path(f"{old}.sha256")):
                if _ours_to_delete(path, directory):
                    path.unlink(missing_ok=True)
        elif verify(old) is None:
            verified += 1


def _ours_to_delete(path: Path, directory: Path) -> bool:
    """Whether retention may delete `path`: a regular file (not a link to one elsewhere) in the checkpoint folder
    itself, both resolved, with a name this module writes. Anything else is left where it is."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    home = os.path.realpath(directory)
    return (stat.S_ISREG(info.st_mode) and os.path.dirname(os.path.realpath(path)) == home
            and (NAME.match(path.name) is not None or NAME.match(path.name.removesuffix(".sha256")) is not None))


def checkpoint_files(directory: str | os.PathLike) -> list[Path]:
    """Checkpoint files (verified or not), newest first (by step)."""
    return _checkpoints(Path(directory))


def _checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files, newest first (by step)."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest verified checkpoint in `directory`; corrupt or partial files are skipped with a warning."""
    for path in _checkpoints(Path(directory)):
        problem = verify(path)
        if problem is None:
            return path
        warnings.warn(f"skipping checkpoint {path}: {problem}", stacklevel=2)
    return None


def _load_verified(path: Path, map_location) -> tuple[dict[str, Any] | None, str | None]:
    """(state, None) when the file matches its side-car, else (None, the reason).

    Hashes the open file in one streaming pass (unless this process already verified it unchanged), then
    torch.loads the same open file, so what was checked is what is loaded; memory stays one state.
    """
    expected, problem = _recorded_digest(path)
    if problem:
        return None, problem
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None, "file missing"
    except OSError as error:
        return None, f"unreadable ({error.strerror or error})"
    with f:
        st = os.fstat(f.fileno())
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, expected)
        if key in _VERDICTS:
            verdict = _VERDICTS[key]
        else:
            try:
                actual = sha256_of(f)
            except OSError as error:
                return None, f"unreadable ({error.strerror or error})"
            verdict = _VERDICTS[key] = None if actual == expected else _mismatch(expected, actual)
        if verdict is not None:
            return None, verdict
        f.seek(0)
        return _torch_load(f, path, map_location), None


DAMAGED_FIX = "delete it (training resumes from the newest intact checkpoint), or run the same command with --force"


def _torch_load(source: Any, where: Path, map_location) -> dict[str, Any]:
    try:
        state = torch.load(source, map_location=map_location, weights_only=True)
    except Exception as error:  # a foreign or damaged file
        raise UserError(f"cannot read checkpoint ({type(error).__name__}: {str(error).splitlines()[0][:200]})",
                        where=str(where), fix=DAMAGED_FIX) from None
    if not isinstance(state, dict):
        raise UserError(f"not a checkpoint of this harness (holds a {type(state).__name__})", where=str(where),
                        fix=DAMAGED_FIX)
    return state


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """torch.load one checkpoint file as it is (no checksum check: see load_verified / load_final_checkpoint)."""
    return _torch_load(path, Path(path), map_location)


def load_verified(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """One checkpoint, verified against its side-car while it is read; UserError naming the file if not."""
    path = Path(path)
    state, problem = _load_verified(path, map_location)
    if problem:
        raise UserError(f"checkpoint is not usable: {problem}", where=str(path),
                        fix="delete it (and its .sha256) to fall back to an earlier checkpoint")
    return state


def load_latest_verified(directory: str | os.PathLike, map_location: str | torch.device = "cpu"
                         ) -> tuple[Path, dict[str, Any]] | tuple[None, None]:
    """(path, state) of the newest checkpoint that verifies, reading each candidate once; damaged ones are
    skipped with a warning naming the file. (None, None) when there is none."""
    for path in _checkpoints(Path(directory)):
        state, problem = _load_verified(path, map_location)
        if problem is None:
            return path, state
        warnings.warn(f"skipping checkpoint {path}: {problem}", stacklevel=2)
    return None, None


def final_checkpoint_problem(run_or_checkpoint_dir: str | os.PathLike, expected_step: int) -> str | None:
    """None when the checkpoint of `expected_step` exists and verifies, else why not (one line, names the file).

    For a pipeline deciding whether a train stage recorded as done really left its final checkpoint.
    """
    path = checkpoint_dir(run_or_checkpoint_dir) / checkpoint_name(expected_step)
    if not path.is_file():
        return f"{path}: final checkpoint missing"
    problem = verify(path)
    return None if problem is None else f"{path}: {problem}"


def load_final_checkpoint(run_or_checkpoint_dir: str | os.PathLike, expected_step: int, *,
                          map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The state of the run's final step (`expected_step` = train.steps), verified; else a UserError.

    Results are computed only from this state: a missing or damaged final checkpoint is an error naming
    the file, never a silent fallback to an earlier step.
    """
    directory = checkpoint_dir(run_or_checkpoint_dir)
    path = directory / checkpoint_name(expected_step)
    retrain = ("train the run to its last step again, which resumes from the newest good checkpoint (delete the "
               "run's stages/train.json and rerun the same reproduce.py run command)")
    if not path.is_file():
        newest = latest_checkpoint(directory)
        found = f"newest verified checkpoint is {newest.name}" if newest else "no verified checkpoint"
        raise UserError(f"final checkpoint {path.name} (step {expected_step}) not found; {found}",
                        where=str(path), fix=retrain)
    state, problem = _load_verified(path, map_location)
    if problem:
        raise UserError(f"final checkpoint (step {expected_step}) is not usable: {problem}", where=str(path),
                        fix=retrain)
    if state.get("step") != expected_step:
        raise UserError(f"checkpoint holds step {state.get('step')!r}, expected the final step {expected_step}",
                        where=str(path), fix=f"delete it and its .sha256, then {retrain}")
    return state


def check_resumable(state: dict[str, Any], model_config: dict, train_config: dict, *, where: str) -> None:
    """Refuse to resume a checkpoint made for another model or recipe, naming the differing fields."""
    differing = [f"model.{k}" for k in sorted(set(model_config) | set(state["model_config"]))
                 if model_config.get(k) != state["model_config"].get(k)]
    differing += [f"train.{k}" for k in sorted(set(train_config) | set(state["train_config"]))
                  if k not in RESUME_TOLERANT_FIELDS and train_config.get(k) != state["train_config"].get(k)]
    if differing:
        shown = ", ".join(f"{f} (checkpoint {_get(state, f)!r}, requested {_get_req(f, model_config, train_config)!r})"
                          for f in differing[:4]) + (", ..." if len(differing) > 4 else "")
        raise UserError(f"checkpoint was made for a different run: {shown}", where=where,
                        fix="run with the original settings to resume, or with --force to start over (the old run is "
                            "kept aside)")


def load_branch_start(runs_root: str | os.PathLike, model_config: dict, train_config: dict, *,
                      map_location: str | torch.device = "cpu") -> tuple[Path, dict[str, Any]]:
    """(path, state) of the parent's verified checkpoint that a decay branch starts from: the one at
    `branch_step` in a run directory of `branch_from` whose model and recipe match (check_branchable). A parent
    without one is a one-line UserError that says to run it first."""
    from exoformer.train.config import TrainConfig

    branch = TrainConfig.from_dict(train_config)
    parent, step = branch.branch_from, branch.branch_step
    refusals = []
    for run_dir in run_dirs_of_spec(runs_root, str(parent), moved_aside=True):
        path = run_dir.checkpoint(int(step))
        if not path.is_file():
            continue
        state, problem = _load_verified(path, map_location)
        if problem is None:
            problem = branch_refusal(state, model_config, branch)
        if problem is None:
            return path, state
        refusals.append(f"{path}: {problem}")
    if refusals:
        raise UserError(f"parent {parent} has no usable checkpoint at step {step}: {refusals[0]}",
                        where=f"train.branch_from={parent}", fix=f"run {parent} with this branch's settings first")
    raise UserError(f"parent {parent} has no checkpoint at step {step} yet: run it first",
                    where=f"{Path(runs_root) / str(parent)}", fix=f"reproduce.py run {parent} (with the same --preset "
                    "and --set), or run the whole ladder: it trains parents before their branches")


def branch_refusal(state: dict[str, Any], model_config: dict, branch: Any) -> str | None:
    """Why a decay branch (a TrainConfig) may not start from checkpoint `state`, else None: another model, a
    recipe that differs in more than `steps` (exoformer/train/schedule.py branch_problem), or another step."""
    from exoformer.train.config import TrainConfig
    from exoformer.train.schedule import branch_problem

    if state.get("step") != branch.branch_step:
        return f"it holds step {state.get('step')!r}, not {branch.branch_step}"
    differing = [k for k in sorted(set(model_config) | set(state["model_config"]))
                 if model_config.get(k) != state["model_config"].get(k)]
    if differing:
        return f"it was made for another model (model.{differing[0]}: {state['model_config'].get(differing[0])!r})"
    try:
        parent = TrainConfig.from_dict(state["train_config"], where="the checkpoint's train_config")
    except UserError as err:
        return err.problem
    return branch_problem(parent, branch, tolerant=RESUME_TOLERANT_FIELDS, kept=True)


def world_size_change(written_by: int, world_size: int) -> str:
    """A note for the resume line when the checkpoint was written by another number of ranks ("" otherwise).

    Such a resume is allowed: the global batch of every step is the same chunks in the same order for any
    world size (exoformer/data/loader.py), the data position is global, and model, optimiser and RNG states are
    whole on rank 0. Only the order of the fp32 gradient sums can change (bitwise equal for 2 ranks vs 1 with
    one micro-batch a rank, tests/train/test_train_world_size_resume.py)."""
    if written_by == world_size:
        return ""
    return (f" (checkpoint written by {written_by} rank(s): the same global batches follow; gradient sums may "
            "differ in their last bits)")


def _get(state: dict, field: str):
    section, key = field.split(".", 1)
    return state[f"{section}_config"].get(key)


def _get_req(field: str, model_config: dict, train_config: dict):
    section, key = field.split(".", 1)
    return (model_config if section == "model" else train_config).get(key)


def model_from_state(state: dict[str, Any], *, where: str):
    """(ExoTransformer in eval mode, ModelConfig) rebuilt from a checkpoint state."""
    from exoformer.model import ExoTransformer
    from exoformer.model.config import ModelConfig
    from exoformer.model.loading import check_tensor_shapes

    config = ModelConfig.from_dict(state["model_config"], where=where)
    check_tensor_shapes(state["model"], config, where=where)  # on the meta device, before any allocation
    model = ExoTransformer(config)
    model.load_state_dict(state["model"])
    return model.eval(), config


def load_model_from_run(out_dir: str | os.PathLike, *, steps: int | None = None,
                        map_location: str | torch.device = "cpu"):
    """(ExoTransformer, ModelConfig) from the verified final checkpoint of a run directory, in eval mode.

    `steps` is the run's final step (train.steps); when omitted it is read from the newest verified
    checkpoint's own recipe, so a run whose last checkpoint is missing or damaged is still refused
    (a state without a recipe is taken as it is).
    """
    directory = checkpoint_dir(out_dir)
    if steps is None:
        path, state = load_latest_verified(directory, map_location)
        if path is None:
            raise UserError("no complete checkpoint", where=str(directory),
                            fix="train the run first (reproduce.py run ...)")
        steps = (state.get("train_config") or {}).get("steps", state.get("step"))
        if state.get("step") != steps:  # the final checkpoint is missing or damaged: say which
            state = load_final_checkpoint(directory, steps, map_location=map_location)
    else:
        state = load_final_checkpoint(directory, steps, map_location=map_location)
    return model_from_state(state, where=str(directory))
