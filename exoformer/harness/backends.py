"""Backends behind one interface: `inline` (in process), `local` (submitit's LocalExecutor with our own
concurrency limit and an explicit timeout), `slurm` (submitit with a cluster profile, many specs as one array).

`Backend.check()` validates everything it can before anything is written (profile, GPUs on the cluster,
partition); `Backend.launch(items, root)` starts the jobs and records each job id in the manifest;
`waits` says whether launch returns only when the jobs have ended. submitit is imported here only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from exoformer.environ import temporary_env
from exoformer.errors import UserError, did_you_mean
from exoformer.harness import locking
from exoformer.harness.pipeline import PipelineJob, run_inline
from exoformer.harness.profiles import Profile, load_profile
from exoformer.harness.spec import Spec
from exoformer.rundir import JOBS_DIR, RunDir

BACKENDS = ("inline", "local", "slurm")


@dataclass(kw_only=True, slots=True)
class Item:
    spec: Spec
    run_dir: Path
    claim: locking.Claim


def default_concurrency() -> int:
    """Local jobs side by side: one per core, each with ONE torch thread (unless OMP_NUM_THREADS is set).

    Measured on the shared 2-core dev machine (gVisor, load ~4 from other work), smoke preset step of 4,096
    tokens: 1 thread ~0.6 s/step, 2 threads ~7 s/step (intra-op threads spin against other processes). So a
    table runs as parallel 1-thread processes, never as multi-threaded ones."""
    return max(1, os.cpu_count() or 1)


class InlineBackend:
    """Runs each pipeline in this process, one after the other (tests, debugging, pdb)."""

    name = "inline"
    waits = True
    profile = None

    def check(self, specs: list[Spec]) -> None:
        return None

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        for item in items:
            run_inline(item.run_dir, item.spec)
            if on_done:
                on_done(item)


class LocalBackend:
    """submitit.LocalExecutor, at most `concurrency` jobs at a time (submitit has no queue, #1685), each with an
    explicit timeout (submitit's default of 2 minutes must never bite: B6)."""

    name = "local"
    waits = True

    def __init__(self, *, concurrency: int | None = None, timeout_min: float = 60.0, signal_delay_s: int = 30,
                 max_requeues: int = 3, threads_per_job: int | None = None, poll_s: float = 0.2,
                 profile: Profile | None = None) -> None:
        if concurrency is not None and concurrency < 1:
            raise UserError(f"must be >= 1, got {concurrency}", where="--jobs", fix="use --jobs 2")
        if threads_per_job is not None and threads_per_job < 1:
            raise UserError(f"must be >= 1, got {threads_per_job}", where="--threads", fix="use --threads 1")
        if timeout_min <= 0:
            raise UserError(f"must be positive, got {timeout_min}", where="--timeout-min",
                            fix="e.g. --timeout-min 60")
        self.concurrency = concurrency or default_concurrency()
        self.timeout_min = float(timeout_min)
        self.signal_delay_s = int(min(signal_delay_s, max(1, self.timeout_min * 60 / 4)))
        self.max_requeues = max_requeues
        self.threads_per_job = threads_per_job
        self.poll_s = poll_s
        self.profile = profile

    def check(self, specs: list[Spec]) -> None:
        return None

    def _executor(self, root: Path):
        import submitit

        executor = submitit.LocalExecutor(folder=root / JOBS_DIR / "%j", max_num_timeout=self.max_requeues)
        executor.update_parameters(timeout_min=self.timeout_min, signal_delay_s=self.signal_delay_s,
                                   tasks_per_node=1, gpus_per_node=0, nodes=1)
        return executor

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        executor = self._executor(root)
        queue, running = list(items), []
        threads = str(self.threads_per_job or os.environ.get("OMP_NUM_THREADS") or 1)
        # inherited by the job processes
        with temporary_env({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}):
            try:
                while queue or running:
                    while queue and len(running) < self.concurrency:
                        item = queue.pop(0)
                        job = _submit_deaf_to_ctrl_c(executor, item)
                        item.claim.job_id, item.claim.folder = str(job.job_id), str(job.paths.folder)
                        if record:
                            record([item.claim])
                        running.append((item, job))
                    time.sleep(self.poll_s)
                    for pair in [p for p in running if p[1].done()]:
                        running.remove(pair)
                        if on_done:
                            on_done(pair[0])
            except KeyboardInterrupt:
                self._stop(running)
                raise

    def _stop(self, running: list, *, grace_s: float = 60.0) -> None:
        """Ctrl-C in the launcher (the jobs ignore it): each job is asked to stop for good and gets SIGTERM, so
        training saves at its next step and the run ends INTERRUPTED; what still runs after `grace_s` is killed.
        No job outlives the launcher."""
        for item, job in running:
            RunDir(item.run_dir).request_stop()
            _signal(job, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not all(job.done() for _, job in running):
            try:
                time.sleep(0.1)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
                break
        for _, job in running:
            if not job.done():
                _signal(job, signal.SIGKILL)


def _submit_deaf_to_ctrl_c(executor, item: Item):
    """Start a local job with SIGINT ignored (inherited by its controller and tasks), so that a Ctrl-C reaches
    only the launcher, which then stops the jobs in order (LocalBackend._stop)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return executor.submit(PipelineJob(), str(item.run_dir), item.spec, "local")
    finally:
        signal.signal(signal.SIGINT, previous)


def _signal(job, sig: int) -> None:
    """Signal a local job's controller (it forwards SIGTERM to its tasks; SIGKILL ends it and its tasks' parent)."""
    process = getattr(job, "_process", None)
    if process is None or process.poll() is not None:
        return
    try:
        if sig == signal.SIGKILL:
            for child in _children(process.pid):
                os.kill(child, signal.SIGKILL)
        process.send_signal(sig)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (Linux /proc), for killing a controller's tasks with it."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields_ = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields_) > 1 and fields_[1] == str(pid):
            out.append(int(stat.parent.name))
    return out


class SlurmBackend:
    """submitit's Slurm executor with a profile from slurm/profiles/; one job array per placement group."""

    name = "slurm"
    waits = False

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
            "slurm_setup": [f"export OMP_NUM_THREADS={max(1, sp.cpus_per_task)}"],
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


def make_backend(name: str, *, profile_name: str | None, preset_profile: str | None, concurrency: int | None,
                 timeout_min: float | None, threads: int | None = None,
                 profile_overrides: dict | None = None) -> InlineBackend | LocalBackend | SlurmBackend:
    """The backend for `run`; the profile is validated here (unknown profile -> one-line error, exit 2)."""
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}", where="--backend", fix=did_you_mean(name, BACKENDS))
    if name == "inline":
        return InlineBackend()
    if name == "local":
        profile = load_profile(profile_name or preset_profile or "cpu", profile_overrides)
        if profile.slurm.nodes > 1:
            raise UserError(f"profile {profile.name!r} needs {profile.slurm.nodes} nodes; the local backend has one",
                            where="--profile", fix="use --backend slurm")
        return LocalBackend(concurrency=concurrency, timeout_min=timeout_min or profile.slurm.time_min,
                            signal_delay_s=profile.slurm.signal_delay_s, max_requeues=profile.slurm.max_requeues,
                            threads_per_job=threads, profile=profile)
    if not profile_name:
        raise UserError("the slurm backend needs a cluster profile", where="--profile",
                        fix="pass --profile NAME (one of slurm/profiles/*.yaml)")
    return SlurmBackend(load_profile(profile_name, profile_overrides))
