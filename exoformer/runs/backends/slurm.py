"""The slurm backend: submitit's Slurm executor with a cluster profile from slurm/profiles/, one job array per
placement group, and `SlurmView`, the squeue/sacct answers that tell whether a queued job is still there.
submitit is imported only when jobs are submitted.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from exoformer.errors import UserError, did_you_mean
from exoformer.runs import locking
from exoformer.runs.backends.base import Item, Liveness, launcher_liveness, said_timed_out
from exoformer.registry.profiles import Profile
from exoformer.registry.spec import Spec
from exoformer.rundir import JOBS_DIR, Status

DIST_TIMEOUT_ENV = "EXOFORMER_DIST_TIMEOUT_S"
"""exoformer.train.distributed.TIMEOUT_ENV (spelled here so that submitting imports no torch)."""


class SlurmView:
    """squeue and sacct answers for many jobs, fetched lazily once per reconciliation."""

    def __init__(self) -> None:
        self._queue: dict[str, str] | None = None

    def queue(self) -> dict[str, str] | None:
        """job id (array tasks as `A_i`) -> state, for every job the controller still holds; None without Slurm."""
        if self._queue is None:
            try:
                out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T"], capture_output=True, text=True,
                                     timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                return None
            if out.returncode != 0:
                return None
            self._queue = dict(line.split("|", 1) for line in out.stdout.splitlines() if "|" in line)
        return self._queue

    @staticmethod
    def final_state(job_id: str) -> str | None:
        """The latest accounting state of a job (`CANCELLED by 0`, `FAILED`, `TIMEOUT` ...), or None."""
        try:
            out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        rows = [line.split("|") for line in out.stdout.splitlines() if line.count("|") == 2]
        rows = [r for r in rows if r[0] == job_id]
        return f"{rows[-1][1]} (exit {rows[-1][2]})" if rows else None


class SlurmBackend:
    """submitit's Slurm executor with a profile from slurm/profiles/; one job array per placement group."""

    name = "slurm"
    waits = False
    submits_under_lock = True
    on_this_machine = False
    parallel_jobs = 0  # `status --watch` follows a cluster's jobs

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def check(self, specs: list[Spec]) -> None:
        """GPUs on a cluster without them, unknown partitions: one-line errors before anything is submitted."""
        sp = self.profile.slurm
        try:
            gres = _slurm_out("sinfo", "-h", "-o", "%G")
            partitions = [p.rstrip("*") for p in _slurm_out("sinfo", "-h", "-o", "%R").split()]
        except FileNotFoundError:
            raise UserError("Slurm is not installed here (no sinfo)", where="--backend slurm",
                            fix="run on a cluster login node or use --backend local") from None
        except RuntimeError as err:
            raise UserError(f"Slurm does not answer ({err})", where="--backend slurm",
                            fix="check SLURM_CONF / the controller, or use --backend local") from None
        if sp.gpus_per_node > 0 and "gpu" not in gres:
            raise UserError(f"profile {self.profile.name!r} asks for {sp.gpus_per_node} GPUs per node but the cluster "
                            "has no GPUs (no gpu GRES in sinfo)", where=f"--profile {self.profile.name}",
                            fix="pick a profile with gpus_per_node: 0 (e.g. testcluster)")
        for spec in specs:
            part = spec.placement.partition or sp.partition
            if part and partitions and part not in partitions:
                raise UserError(f"unknown partition {part!r} on this cluster", where=f"--profile {self.profile.name}",
                                fix=did_you_mean(part, partitions))

    @classmethod
    def liveness(cls, claim: locking.Claim | None, status: Status, view: SlurmView) -> Liveness:
        """In squeue: alive; else its accounting state says how it ended (TIMEOUT: timed out)."""
        job_id = status.job_id or (claim.job_id if claim else None)
        if not job_id:
            return launcher_liveness(claim)  # not submitted yet: the launcher is submitting it
        queue = view.queue()
        if queue is None:
            return Liveness(alive=None, reason="no Slurm client here")
        if job_id in queue:
            return Liveness(alive=True, reason=queue[job_id])
        final = view.final_state(job_id)
        folder = Path(claim.folder) if claim and claim.folder else None
        log = folder / f"{job_id}_0_log.err" if folder else None
        timed_out = bool(final and final.startswith("TIMEOUT")) or said_timed_out(log)
        return Liveness(alive=False, timed_out=timed_out, reason=f"slurm job {job_id} ended without a result: "
                        + (final or "no longer in the queue"), log=str(log) if log and log.exists() else None)

    def _executor(self, root: Path, spec: Spec, n_items: int):
        import submitit

        sp = self.profile.slurm
        executor = submitit.AutoExecutor(folder=root / JOBS_DIR / "%j", cluster="slurm",
                                         slurm_max_num_timeout=sp.max_requeues)
        params = {
            "name": f"exo-{spec.name}" if n_items == 1 else f"exo-{spec.group}", "timeout_min": int(sp.time_min),
            "nodes": sp.nodes, "tasks_per_node": sp.tasks, "cpus_per_task": sp.cpus_per_task, "mem_gb": sp.mem_gb,
            "slurm_array_parallelism": sp.array_parallelism, "slurm_signal_delay_s": sp.signal_delay_s,
            # torch would start one thread per visible core, not per allocated CPU (see default_concurrency)
            "slurm_setup": [f"export OMP_NUM_THREADS={max(1, sp.cpus_per_task)}",
                            f"export {DIST_TIMEOUT_ENV}={sp.dist_timeout_s}"],  # the profile's collective timeout
        }
        if sp.gpus_per_node:
            params["gpus_per_node"] = sp.gpus_per_node
        for key in ("partition", "account", "qos"):
            value = getattr(spec.placement, key) or getattr(sp, key)
            if value:
                params[f"slurm_{key}"] = value
        if sp.constraint:
            params["slurm_constraint"] = sp.constraint
        extra = sbatch_extra_parameters(sp.sbatch_extra, where=f"slurm/profiles/{self.profile.name}.yaml")
        if extra:
            params["slurm_additional_parameters"] = extra
        executor.update_parameters(**params)
        return executor

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        groups: dict[tuple, list[Item]] = {}
        for item in items:  # one array per placement (all members of an array share the executor's parameters)
            p = item.spec.placement
            groups.setdefault((p.partition, p.account, p.qos), []).append(item)
        for members in groups.values():
            executor = self._executor(root, members[0].spec, len(members))
            from exoformer.runs.pipeline import PipelineJob

            with executor.batch():
                jobs = [executor.submit(PipelineJob(), str(i.run_dir), i.spec, "slurm") for i in members]
            for item, job in zip(members, jobs):
                item.claim.job_id, item.claim.folder = str(job.job_id), str(root / JOBS_DIR / str(job.job_id))
            if record:
                record([i.claim for i in members])


def sbatch_extra_parameters(lines: tuple[str, ...], *, where: str) -> dict[str, object]:
    """`--reservation=foo`, `--exclusive` -> submitit's additional_parameters {key: value or True}."""
    params: dict[str, object] = {}
    for line in lines:
        text = line.strip().removeprefix("#SBATCH").strip()
        if not text.startswith("--"):
            raise UserError(f"sbatch_extra line {line!r} is not a long option", where=where,
                            fix='write e.g. "--reservation=foo"')
        key, _, value = text[2:].partition("=")
        params[key.strip().replace("-", "_")] = value.strip() if value else True
    return params


def _slurm_out(*args: str, timeout: float = 30) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"{args[0]} exited {done.returncode}")
    return done.stdout
