"""The per-spec pipeline as one resumable job: train -> validate -> evaluate -> analyse (docs/architecture.md "Runs").

Each stage is `fn(ctx: StageContext) -> dict`; its dict goes to the run's stage record when it returns, and a
restarted job skips stages that have one. The job holds the run directory's job lock for its whole life, so
two jobs never write into one run, whatever STATUS says.

`PipelineJob` is what the backends execute. It is a submitit `Checkpointable`: on Slurm's USR2 (time limit or
preemption) the training loop saves at the next step boundary and returns `interrupted`; the job then
hands the signal back to submitit's handler, which calls `checkpoint()` and requeues the job (`scontrol
requeue` on Slurm, exit code 144 under the local executor), and the next attempt resumes from the checkpoint
(docs/ecosystem.md B4). On Slurm's own SIGTERM (`scontrol requeue`, a preemption, scancel) every rank saves and
returns the same way, but Slurm is already requeueing or ending the job, so it is not requeued again.
Multi-task jobs export torch.distributed variables from submitit's job environment (B5) and run inside
exoformer.train.distributed.fail_together, so that one rank's error stops every rank at once.
Such a job holds one process group for its life: rank 0 runs the pipeline and announces each stage it starts;
the other ranks follow and join training, validation and evaluation, which split their work across the ranks
(results gathered on rank 0). A checkpoint run (its spec's source is `checkpoint`: it imports instead of
training) runs on rank 0 alone.
Every stage gets the job's accelerator as `StageContext.device` (`job_device`).
A Slurm profile with `eval_as_job` splits a run into two jobs (PARTS): "train" stops after training with the run
PENDING, and "after-train" runs the rest on the evaluation resources; it never trains (docs/cluster.md).
Ctrl-C (KeyboardInterrupt) marks the run INTERRUPTED, which a plain `run` resumes.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from exoformer.analysis.stage import analyse_stage
from exoformer.eval.stage import evaluate_stage, validate_stage
from exoformer.faults import RunDirectoryGone, check_run_dir, guard_run_dir, is_machine_fault
from exoformer.runs import rundirs as runs
from exoformer.runs.health import health_check_or_exit
from exoformer.registry.spec import STAGES, Spec, wanted_stages
from exoformer.io import remove_temp_files
from exoformer.process_exit import collect_then_freeze_at_exit
from exoformer.rundir import RunDir
from exoformer.run_identity import CHECKPOINT
from exoformer.stage import StageContext, StageFunction, run_source

try:  # the job class must be a Checkpointable when submitit is there; inline runs work without it
    from submitit.helpers import Checkpointable as _JobBase
except ImportError:  # pragma: no cover - submitit is a pinned requirement
    _JobBase = object  # type: ignore[misc,assignment]

INTERRUPTED, STOPPED, DONE, HANDED_OVER = "interrupted", "stopped", "done", "handed-over"
PARTS = ("all", "train", "after-train")
"""What one job runs: every stage, training only (its evaluation is a job of its own), or the stages after it."""


class StageInterrupted(Exception):
    """The train stage stopped on SIGTERM/SIGUSR2 after saving a checkpoint: requeue, do not fail."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(f"stopped at step {result.get('step')}")
        self.result = result


def train_stage(ctx: StageContext) -> dict[str, Any]:
    """Train (or resume) into the run directory with exoformer.train.loop.train."""
    from exoformer.train import distributed as dist_util
    from exoformer.train.loop import train

    if ctx.spec.train.data and os.environ.get("RANK", "0") == "0":  # rank 0 owns provenance.json
        with dist_util.working_alone("checksumming the data"):  # minutes at paper scale
            _record_data(ctx)
    dist_util.barrier()  # the others wait here, not in training's first collective (its timeout)
    result = train(ctx.spec.model, ctx.spec.train, ctx.run_dir, device=ctx.device)
    summary = {"step": result.step, "tokens": result.tokens, "final_train_loss": result.final_train_loss}
    if result.interrupted:
        raise StageInterrupted(summary)
    return summary


def _record_data(ctx: StageContext) -> None:
    """Data checksums go to provenance.json once (the shards never change under a run)."""
    job = ctx.files.read_provenance().get("job")
    if isinstance(job, dict) and "data_checksums" in job:
        return
    from exoformer.train.loop import resolve_data_dir

    data_dir = resolve_data_dir(ctx.spec.train.data)
    ctx.files.record_job_provenance({"data_dir": str(data_dir), "data_checksums": runs.data_checksums(data_dir)})


STAGE_FUNCTIONS: dict[str, StageFunction] = {
    "train": train_stage, "validate": validate_stage, "evaluate": evaluate_stage, "analyse": analyse_stage,
}
"""Stage name -> function (tests swap entries for fakes)."""


def stage_function(spec: Spec, stage: str) -> StageFunction:
    """The function of `stage` for `spec`: a spec may bring its own (a checkpoint run imports instead of
    training, exoformer.checkpoint_import.checkpoint_run), else STAGE_FUNCTIONS'."""
    return spec.stage_functions().get(stage) or STAGE_FUNCTIONS[stage]


# --------------------------------------------------------------------------------------------- logging

class _Tee(io.TextIOBase):
    """Writes to the attempt log and, for inline runs, to the terminal too."""

    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
            s.flush()
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def _capture(log_path: Path, echo: bool) -> Iterator[logging.Logger]:
    """stdout, stderr and a logger all go to logs/attempt-N.log (plus the terminal when `echo`)."""
    with log_path.open("a", encoding="utf-8", buffering=1) as f:
        out = _Tee(f, sys.__stdout__) if echo and sys.__stdout__ else _Tee(f, sys.stdout)
        err = _Tee(f, sys.__stderr__) if echo and sys.__stderr__ else _Tee(f, sys.stderr)
        logger = logging.getLogger(f"exoformer.run.{log_path.parent.parent.name}")
        handler = logging.StreamHandler(out)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                yield logger
            finally:
                logger.removeHandler(handler)


# --------------------------------------------------------------------------------------------- the job

def _job_id_and_rank() -> tuple[str | None, int, int]:
    """(job id, global rank, number of tasks) under submitit; (None, 0, 1) in process."""
    if "SUBMITIT_EXECUTOR" not in os.environ:
        return None, 0, 1
    import submitit

    env = submitit.JobEnvironment()
    return str(env.job_id), env.global_rank, env.num_tasks


def export_distributed_env() -> None:
    """MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK (and CUDA_VISIBLE_DEVICES per task when the job was given
    GPUs) from submitit's job environment, for exoformer.train's env:// process group (docs/ecosystem.md B5;
    submitit #1704); on Slurm the rendezvous is exoformer.train.distributed.slurm_rendezvous. On a CPU job no
    GPU is named, so exoformer.train.distributed.pick_device picks the CPU."""
    from submitit.helpers import TorchDistributedEnvironment

    from exoformer.train.distributed import export_slurm_rendezvous

    TorchDistributedEnvironment().export(set_cuda_visible_devices=job_has_gpus(os.environ))
    export_slurm_rendezvous()  # the first node's address and a port from the job id (multi-node jobs)


def job_has_gpus(env: dict[str, str] | os._Environ) -> bool:
    """Whether Slurm gave this job GPUs (its GPU variables, or a CUDA_VISIBLE_DEVICES naming a device)."""
    from exoformer.train.distributed import NO_GPU_VALUES

    for key in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE"):
        if env.get(key, "").strip() not in ("", "0"):
            return True
    return env.get("CUDA_VISIBLE_DEVICES", "").strip() not in NO_GPU_VALUES


def _device_info() -> dict[str, Any]:
    info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = torch.cuda.device_count()
    except ImportError:  # pragma: no cover
        pass
    return info


def run_pipeline(run_dir: Path, spec: Spec, *, backend: str, job_id: str | None = None, device: str | None = None,
                 echo: bool = False, part: str = "all") -> str:
    """Run the stages not yet done, holding the run's job lock. Returns DONE or INTERRUPTED; a failing stage writes
    FAILED (reason, traceback path) and re-raises, so that submitit also records the error (never swallowed,
    docs/ecosystem.md B3). Ctrl-C writes INTERRUPTED and re-raises."""
    run_dir = Path(run_dir)
    if run_dir.name != spec.hash12:
        raise ValueError(f"{run_dir} is not the run directory of hash {spec.hash12}")
    rd = RunDir(run_dir)
    device = device or job_device()
    with rd.job_lock(), guard_run_dir(rd.path):
        remove_temp_files(rd.path, recursive=True)  # writes a killed attempt cut short
        return _run_stages(rd, spec, backend=backend, job_id=job_id, device=device, echo=echo, part=part)


def job_device() -> str:
    """This process's accelerator, the device every stage runs on: its GPU (by local rank), else the CPU.
    A rank given a GPU it cannot see fails here in one line (exoformer.train.distributed.pick_device)."""
    from exoformer.train import distributed as dist_util

    return str(dist_util.pick_device(None, dist_util.distributed_env()))


SHARDED_STAGES = ("train", "validate", "evaluate")
"""Stages every rank of a multi-rank job runs together (data parallel training, validation split by batches,
lm-eval split by documents, results on rank 0); the others run on rank 0 alone."""


class _StagePlan:
    """Rank 0 announces each stage it starts, in order, then `done`; the other ranks follow (PipelineJob)."""

    def __init__(self) -> None:
        self.count = 0

    def announce(self, stage: str) -> None:
        from exoformer.train import distributed as dist_util

        dist_util.announce(f"stage-{self.count}", stage)
        self.count += 1


def follow_stages() -> Iterator[str]:
    """On a rank other than 0: the stages rank 0 starts, as it starts them, until it is done."""
    from exoformer.train import distributed as dist_util

    for count in itertools.count():
        stage = dist_util.hear(f"stage-{count}")
        if stage in (None, "done"):
            return
        yield stage


def _run_stages(rd: RunDir, spec: Spec, *, backend: str, job_id: str | None, device: str | None, echo: bool,
                part: str = "all") -> str:
    log_path = rd.new_log_path(job_id)
    rd.write_status(runs.Status(state=runs.RUNNING, stage=None, log=str(log_path), job_id=job_id, backend=backend,
                                started=runs.now(), host=socket.gethostname(), pid=os.getpid(), reason=None))
    with _capture(log_path, echo) as log:
        log.info(f"{spec.name} ({spec.hash12}) on {socket.gethostname()}, pid {os.getpid()}, backend {backend}"
                 + (f", job {job_id}" if job_id else ""))
        rd.record_job_provenance({**_device_info(), "device": device, "started": runs.now(), "job_id": job_id})
        plan, failed = _StagePlan(), False
        try:
            for stage in STAGES:
                if stage not in wanted_stages(spec):
                    log.info(f"{stage}: disabled by the spec")
                    continue
                if part == "train" and stage != "train":  # the evaluation job takes over from here
                    log.info(f"training done; {stage} and the stages after it run in the evaluation job")
                    rd.update_status(state=runs.PENDING, stage=None, pid=None,
                                     reason="trained; validation, evaluation and analysis wait for their own job")
                    return HANDED_OVER
                if rd.stage_done(stage):
                    problem = _final_checkpoint_problem(rd, spec) if stage == "train" else None
                    if problem is None:
                        log.info(f"{stage}: already done")
                        continue
                    log.info(f"train: recorded as done, but {problem}: training again from the newest good "
                             "checkpoint")
                if part == "after-train" and stage == "train":  # an evaluation job never trains
                    log.info("train: not finished; the evaluation job stops")
                    rd.update_status(state=runs.INTERRUPTED, pid=None, reason="training has not finished, so "
                                     "evaluation cannot start; run the same command to resume")
                    return STOPPED
                check_run_dir(rd.path)
                rd.update_status(stage=stage)
                started = time.time()
                log.info(f"{stage}: start")
                plan.announce(stage)
                try:
                    result = stage_function(spec, stage)(StageContext(run_dir=rd.path, spec=spec, device=device,
                                                                      say=log.info))
                except StageInterrupted as stop:
                    if rd.stop_requested():  # the launcher was interrupted: stop for good, a plain `run` resumes
                        rd.clear_stop()
                        log.info(f"{stage}: stopped ({stop}); checkpoint saved")
                        rd.update_status(state=runs.INTERRUPTED, pid=None, reason=f"interrupted (Ctrl-C) in {stage} "
                                         f"at step {stop.result.get('step')}; run the same command to resume")
                        return STOPPED
                    log.info(f"{stage}: interrupted ({stop}); checkpoint saved, requeueing")
                    rd.update_status(state=runs.PENDING, reason=f"stopped by a signal in {stage} at step "
                                     f"{stop.result.get('step')}; requeued", pid=None)
                    return INTERRUPTED
                except KeyboardInterrupt:
                    log.info(f"{stage}: interrupted (Ctrl-C)")
                    rd.update_status(state=runs.INTERRUPTED, pid=None,
                                     reason=f"interrupted (Ctrl-C) during {stage}; run the same command to resume")
                    raise
                except RunDirectoryGone as gone:
                    log.info(f"{stage}: {gone}")
                    raise
                except SystemExit:  # submitit's handler of a time-limit or preemption signal: requeued, not failed
                    log.info(f"{stage}: stopped by a signal; requeued")
                    rd.update_status(state=runs.PENDING, reason=f"stopped by a signal during {stage}; requeued",
                                     pid=None)
                    raise
                except BaseException as err:
                    check_run_dir(rd.path)
                    if type(err).__name__ == "UncompletedJobError":  # submitit: not requeued (again) after a signal
                        what = "timed out" if "timed-out" in str(err) else "stopped by a signal"
                        rd.update_status(state=runs.INTERRUPTED, pid=None, reason=f"{what} during {stage} ("
                                         f"{' '.join(str(err).split())[:200]}); run the same command to resume")
                        raise
                    if is_machine_fault(err):  # the checkpoints are intact: a plain `run` resumes once it is fixed
                        log.info(f"{stage}: stopped: {err}")
                        reason = f"interrupted during {stage}: {' '.join(str(err).split())}"[:500]
                        rd.update_status(state=runs.INTERRUPTED, reason=reason, pid=None)
                        raise
                    trace = traceback.format_exc()
                    print(trace, file=sys.stderr)
                    trace_path = rd.traceback_path(log_path)
                    runs.atomic_write_text(trace_path, trace)
                    reason = f"{stage}: {type(err).__name__}: {' '.join(str(err).split())}"[:500]
                    rd.update_status(state=runs.FAILED, reason=reason, log=str(trace_path), pid=None)
                    raise
                check_run_dir(rd.path)
                rd.record_stage(stage, {"stage": stage, "seconds": round(time.time() - started, 3),
                                        "finished": runs.now(), "result": result})
                log.info(f"{stage}: done in {time.time() - started:.1f} s")
        except BaseException:
            failed = True  # the other ranks stop on the failure itself (exoformer.train.distributed.fail_together)
            raise
        finally:
            if not failed:
                plan.announce("done")  # the other ranks stop following rank 0
        check_run_dir(rd.path)
        rd.update_status(state=runs.SUCCEEDED, stage=None, reason=None, pid=None)
        log.info("SUCCEEDED")
    return DONE


def _final_checkpoint_problem(rd: RunDir, spec: Spec) -> str | None:
    """Why the final checkpoint cannot serve the stages still to run (None: it verifies, or nothing needs it)."""
    if not rd.missing_stage_records([s for s in wanted_stages(spec) if s != "train"]):
        return None
    from exoformer.train.checkpoint import final_checkpoint_problem

    return final_checkpoint_problem(rd.checkpoints, spec.train.steps)


class PipelineJob(_JobBase):  # type: ignore[misc,valid-type]
    """The callable submitit runs: `PipelineJob()(run_dir, spec, backend)`. Stateless, so that submitit's default
    `checkpoint()` (resubmit self with the same arguments) resumes from the run directories.

    `then`: (run_dir, spec) of runs this one-task job runs after the first, in this process, each only once the
    one before it is done: the local backend runs a stable run's decay branches in its job, which spares each
    branch the start of a process (exoformer/budget/cost.py prices it so)."""

    def __call__(self, run_dir: str, spec: Spec, backend: str, part: str = "all",
                 then: tuple[tuple[str, Spec], ...] = ()) -> dict[str, Any]:
        collect_then_freeze_at_exit()  # the next job (or the table) waits for this process's exit
        job_id, rank, tasks = _job_id_and_rank()
        if then and tasks != 1:
            raise ValueError("runs that follow another in its job need a one-task job")
        if tasks == 1:
            return self.run_in_order([(run_dir, spec), *then], backend, job_id=job_id, part=part)
        if run_source(spec) == CHECKPOINT:  # it imports instead of training: nothing to share, rank 0 runs alone
            if rank != 0:
                return {"state": "rank-idle", "rank": rank}
            return self.run_rank(run_dir, spec, backend, job_id=job_id, rank=0, part=part)
        export_distributed_env()
        from exoformer.train import distributed as dist_util

        # any rank's error, even rank 0's before training (its job lock), stops the others at once
        env = dist_util.DistEnv(rank=rank, world_size=tasks, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
        with dist_util.fail_together(env):
            started = dist_util.init_process_group(env, dist_util.pick_device(None, env))  # one group per job
            try:
                return self.run_rank(run_dir, spec, backend, job_id=job_id, rank=rank, part=part)
            finally:
                if started:
                    import torch.distributed

                    torch.distributed.destroy_process_group()

    def run_in_order(self, in_order: list[tuple[str, Spec]], backend: str, *, job_id: str | None,
                     part: str) -> dict[str, Any]:
        """Each run in turn on rank 0 of a one-task job. A run already SUCCEEDED with every stage recorded (a
        requeued job that finished it before) is passed over. A run starts only once the one before it is done
        and no stop was asked for it; otherwise it stays queued, or says why it did not start when the run
        before it failed or was interrupted (a plain `run` starts it again)."""
        results: list[dict[str, Any]] = []
        for i, (run_dir, spec) in enumerate(in_order):
            if i and RunDir(run_dir).stop_requested():
                break  # Ctrl-C in the launcher: it stays queued, and the launcher puts it back to un-run
            if i and results[-1].get("outcome") != DONE:
                _did_not_start(in_order[i:], in_order[i - 1][1].name, results[-1])
                break
            if _finished(RunDir(run_dir), spec):
                results.append({"state": runs.SUCCEEDED, "outcome": DONE, "run_dir": run_dir})
                continue
            try:
                results.append(self.run_rank(run_dir, spec, backend, job_id=job_id, rank=0, part=part))
            except BaseException as err:
                if not isinstance(err, (KeyboardInterrupt, SystemExit)):  # FAILED, or INTERRUPTED by the machine
                    status = RunDir(run_dir).read_status()
                    _did_not_start(in_order[i + 1:], spec.name, {"state": status.state if status else None})
                raise
        return results[0] if len(results) == 1 else {**results[0], "then": results[1:]}

    def run_rank(self, run_dir: str, spec: Spec, backend: str, *, job_id: str | None, rank: int,
                 part: str = "all") -> dict[str, Any]:
        """One rank's share: rank 0 runs the pipeline and owns the run directory; the others follow the stages
        it announces and join those in SHARDED_STAGES (their results go to rank 0, they write nothing)."""
        health_check_or_exit(run_dir, spec.model, spec.train.precision, job_device())  # ends the job in one line
        if rank != 0:
            device = job_device()
            for stage in follow_stages():
                if stage in SHARDED_STAGES:
                    with contextlib.suppress(StageInterrupted):
                        stage_function(spec, stage)(StageContext(run_dir=Path(run_dir), spec=spec, device=device))
            return {"state": "rank-done", "rank": rank}
        outcome = run_pipeline(Path(run_dir), spec, backend=backend, job_id=job_id, part=part)
        if outcome == INTERRUPTED and job_id is not None:
            from exoformer.runs.slurm_job import slurm_is_ending

            if not slurm_is_ending():  # USR2 before the time limit; after SIGTERM Slurm requeues (or ends) it
                _requeue_through_submitit()
        status = RunDir(run_dir).read_status()
        return {"state": status.state if status else None, "outcome": outcome, "run_dir": run_dir}


def _finished(rd: RunDir, spec: Spec) -> bool:
    """SUCCEEDED with a record of every stage the spec wants: nothing left for a job to do."""
    status = rd.read_status()
    return status is not None and status.state == runs.SUCCEEDED and not rd.missing_stage_records(wanted_stages(spec))


def _did_not_start(waiting: list[tuple[str, Spec]], before: str, result: dict[str, Any]) -> None:
    """The runs a job did not start because `before`, run ahead of them in it, did not finish. After a failure or
    an interruption each says so and reads INTERRUPTED (a plain `run` starts it); after a stop asked for (Ctrl-C
    in the launcher) they stay queued, and the launcher puts them back to un-run."""
    if result.get("outcome") == STOPPED:
        return
    why = "failed" if result.get("state") == runs.FAILED else "was interrupted"
    for run_dir, _ in waiting:
        rd = RunDir(run_dir)
        status = rd.read_status()
        if status is not None and status.state == runs.PENDING and not rd.job_lock_held():
            rd.update_status(state=runs.INTERRUPTED, pid=None, reason=f"not started: {before}, run before it in "
                             f"the same job, {why}; run the same command to start it")


def _requeue_through_submitit() -> None:
    """The training loop took USR2/SIGTERM and returned; give USR2 back to submitit's handler (restored by
    then), which calls checkpoint() and requeues within its timeout budget, then exits."""
    signal.raise_signal(signal.SIGUSR2)
    time.sleep(5)  # the handler runs at the next bytecode; exiting is its job


def run_inline(run_dir: Path, spec: Spec, *, echo: bool = True) -> str:
    """In process (tests, debugging): the outcome, with failures recorded in STATUS instead of raised (Ctrl-C
    still propagates, after STATUS says INTERRUPTED)."""
    try:
        return run_pipeline(run_dir, spec, backend="inline", echo=echo)
    except Exception:  # noqa: BLE001 - recorded in STATUS with its traceback by run_pipeline
        return runs.FAILED
