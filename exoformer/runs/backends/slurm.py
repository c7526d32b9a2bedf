"""The slurm backend: submitit's Slurm executor with a cluster profile from slurm/profiles/.

A plan goes in as job arrays within the site's limits (exoformer/runs/backends/slurm_query.py SiteLimits):
- Each array's indices start at 0 and stay below MaxArraySize; `array_parallelism` is its `%N` throttle.
- Each array waits for the one before it (`afterany`), so the throttle holds across arrays.
- When the user's queued-job limit leaves no room for the whole plan, a small "link" job waits (`afterany`) for
  the last array submitted, then submits the next arrays and the next link from the compute node.
- With the profile's `eval_as_job`, validation, evaluation and analysis are an array of their own, each task
  after its training task succeeded (`aftercorr`, the per-task `afterok` of arrays), on the eval_* resources.
Every submission is recorded in the manifest at once, so a launcher killed between arrays loses nothing: `run`
again submits only the runs that no job holds (docs/cluster.md "Limits of a shared cluster").
submitit is imported only when jobs are submitted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from exoformer.errors import UserError, did_you_mean
from exoformer.runs import locking
from exoformer.runs.backends.base import Item, Liveness, launcher_liveness, said_timed_out
from exoformer.runs.backends.slurm_query import (SiteLimits, SlurmUnavailable, SlurmView, array_id, queued_count,
                                                 site_limits, slurm_command, waiting_words)
from exoformer.registry.profiles import Profile
from exoformer.registry.spec import Spec
from exoformer.rundir import JOBS_DIR, RunDir, Status

DIST_TIMEOUT_ENV = "EXOFORMER_DIST_TIMEOUT_S"
"""exoformer.train.distributed.TIMEOUT_ENV (spelled here so that submitting imports no torch)."""


class SlurmBackend:
    """submitit's Slurm executor with a profile from slurm/profiles/; arrays within the site's limits."""

    name = "slurm"
    waits = False
    submits_under_lock = True
    on_this_machine = False
    parallel_jobs = 0  # `status --watch` follows a cluster's jobs

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.notes: list[str] = []
        """One line per array or link submitted, for `run` to print."""
        self._limits: dict[str | None, SiteLimits] = {}

    def check(self, specs: list[Spec]) -> None:
        """GPUs on a cluster without them, unknown partitions, a queue with no room: one-line errors before
        anything is submitted."""
        sp = self.profile.slurm
        try:
            gres = slurm_command("sinfo", "-h", "-o", "%G")
            partitions = [p.rstrip("*") for p in slurm_command("sinfo", "-h", "-o", "%R").split()]
        except SlurmUnavailable as err:
            if "not installed" in str(err):
                raise UserError("Slurm is not installed here (no sinfo)", where="--backend slurm",
                                fix="run on a cluster login node or use --backend local") from None
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
        self._check_room(specs)

    def _check_room(self, specs: list[Spec]) -> None:
        """Refuse a plan of which not one array fits the room left in the user's queue."""
        queued = queued_count(SlurmView().queue())
        for qos in sorted({spec.placement.qos or "" for spec in specs}):
            self._chunks(sum(1 for spec in specs if (spec.placement.qos or "") == qos), qos or None, queued)

    def _chunks(self, n_runs: int, qos: str | None, queued: int) -> tuple[list[int], bool, int, SiteLimits]:
        """(array sizes to submit now, whether a link carries the rest, queued jobs per run, the limits) for
        `n_runs` runs of `qos` beside `queued` jobs of the user; a UserError when not one array fits."""
        limits = self.limits(qos)
        per_run = 2 if self.profile.slurm.eval_as_job else 1
        room = None if limits.max_submit is None else limits.max_submit - queued
        sizes, link = chunk_sizes(n_runs, jobs_per_run=per_run, max_array_size=limits.max_array_size, room=room)
        if not sizes:
            raise UserError(f"no room in the queue: {queued} of your jobs are queued and the site allows "
                            f"{limits.max_submit} ({limits.describe()})", where=f"--profile {self.profile.name}",
                            fix="run again when jobs have left the queue, or set slurm.max_submit_jobs if the "
                                "limit read is wrong")
        return sizes, link, per_run, limits

    def limits(self, qos: str | None) -> SiteLimits:
        """The site's limits for jobs of `qos` (the profile's when None), read once per backend."""
        sp = self.profile.slurm
        qos = qos or sp.qos
        if qos not in self._limits:
            self._limits[qos] = site_limits(max_array_size=sp.max_array_size, max_submit=sp.max_submit_jobs, qos=qos)
        return self._limits[qos]

    @classmethod
    def liveness(cls, claim: locking.Claim | None, status: Status, view: SlurmView) -> Liveness:
        """Alive while any job of the run (training, its evaluation, or the link that will submit it) is in this
        user's queue; else its accounting state says how it ended (TIMEOUT: timed out)."""
        ids = [j for j in dict.fromkeys((status.job_id, claim.job_id if claim else None,
                                         claim.eval_job_id if claim else None)) if j]
        if not ids:
            return launcher_liveness(claim)  # not submitted yet: the launcher is submitting it
        queue = view.queue()
        if queue is None:
            return Liveness(alive=None, reason=f"Slurm cannot be asked here ({view.problem or 'no squeue'})")
        for job_id in ids:
            job = queue.get(job_id)
            if job is not None and not job.ended:
                return Liveness(alive=True, reason=job.state if job.state != "PENDING" else
                                f"PENDING: {waiting_words(job.reason)}")
        job_id = ids[-1]  # the latest of the run's jobs says how it ended
        shown = queue.get(job_id)  # an ended job stays in squeue for MinJobAge: its state is the answer
        final = f"{shown.state} (squeue)" if shown is not None else view.final_state(job_id)
        folder = Path(claim.folder) if claim and claim.folder else None
        log = folder / f"{job_id}_0_log.err" if folder else None
        timed_out = bool(final and final.startswith("TIMEOUT")) or said_timed_out(log)
        return Liveness(alive=False, timed_out=timed_out, reason=f"slurm job {job_id} ended without a result: "
                        + (final or "no longer in the queue"), log=str(log) if log and log.exists() else None)

    def _executor(self, root: Path, spec: Spec, n_items: int, *, part: str = "all",
                  after: str | None = None):
        """An executor for one array of `part` ("all", "train", "after-train", "link"), waiting for `after`."""
        import submitit

        sp = self.profile.slurm
        executor = submitit.AutoExecutor(folder=root / JOBS_DIR / "%j", cluster="slurm",
                                         slurm_max_num_timeout=sp.max_requeues)
        label = {"all": "", "train": "", "after-train": "eval-", "link": "link-"}[part]
        params = {
            "name": f"exo-{label}{spec.name}" if n_items == 1 else f"exo-{label}{spec.group}",
            "timeout_min": int(sp.time_min), "nodes": sp.nodes, "tasks_per_node": sp.tasks,
            "cpus_per_task": sp.cpus_per_task, "mem_gb": sp.mem_gb,
            "slurm_array_parallelism": sp.array_parallelism, "slurm_signal_delay_s": sp.signal_delay_s,
            # torch would start one thread per visible core, not per allocated CPU (see default_concurrency)
            "slurm_setup": [f"export OMP_NUM_THREADS={max(1, sp.cpus_per_task)}",
                            f"export {DIST_TIMEOUT_ENV}={sp.dist_timeout_s}"],  # the profile's collective timeout
        }
        gpus = sp.gpus_per_node
        if part == "after-train":  # one rank on the evaluation resources
            params.update(nodes=1, tasks_per_node=1, mem_gb=sp.eval_mem_gb or sp.mem_gb,
                          timeout_min=int(sp.eval_time_min or sp.time_min))
            gpus = sp.eval_gpus_per_node
        elif part == "link":  # a few seconds of sbatch on one CPU
            params.update(nodes=1, tasks_per_node=1, cpus_per_task=1, mem_gb=1, timeout_min=10)
            gpus = 0
        if gpus:
            params["gpus_per_node"] = gpus
        for key in ("partition", "account", "qos"):
            value = getattr(spec.placement, key) or getattr(sp, key)
            if value:
                params[f"slurm_{key}"] = value
        if sp.constraint:
            params["slurm_constraint"] = sp.constraint
        extra = sbatch_extra_parameters(sp.sbatch_extra, where=f"slurm/profiles/{self.profile.name}.yaml")
        if after:
            extra.update(dependency=after, kill_on_invalid_dep="yes")
        if extra:
            params["slurm_additional_parameters"] = extra
        executor.update_parameters(**params)
        return executor

    def launch(self, items: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None] | None = None,
               on_done: Callable[[Item], None] | None = None) -> None:
        groups: dict[tuple, list[Item]] = {}
        for item in items:  # arrays per placement (all members of an array share the executor's parameters)
            p = item.spec.placement
            groups.setdefault((p.partition, p.account, p.qos), []).append(item)
        view = SlurmView()
        queued = queued_count(view.queue())
        for members in groups.values():
            queued += self.submit(members, root, record=record or (lambda claims: None), queued=queued)

    def submit(self, members: list[Item], root: Path, *, record: Callable[[list[locking.Claim]], None],
               queued: int) -> int:
        """Submit `members` (one placement) as arrays within the site's limits, the rest behind a link job;
        returns the jobs it queued. `queued`: this user's jobs in the queue now."""
        sizes, link, per_run, limits = self._chunks(len(members), members[0].spec.placement.qos, queued)
        jobs, previous, start = 0, None, 0
        for size in sizes:
            chunk = members[start:start + size]
            start += size
            arrays = self._submit_chunk(chunk, root, after=f"afterany:{previous[0]}" if previous else None)
            record([i.claim for i in chunk])
            jobs += per_run * size
            self.notes.append(f"array {arrays[0]}: {size} run(s)"
                              + "".join(f", evaluation {a}" for a in arrays[1:])
                              + (f", after array {previous[0]}" if previous else ""))
            previous = arrays
        rest = members[start:]
        if link and rest:
            self._submit_link(rest, root, after="afterany:" + ":".join(previous))
            record([i.claim for i in rest])
            jobs += 1
            self.notes.append(f"link job {rest[0].claim.job_id}: submits the other {len(rest)} run(s) as the "
                              f"arrays above leave the queue ({limits.describe()})")
        return jobs

    def _submit_chunk(self, chunk: list[Item], root: Path, *, after: str | None) -> list[str]:
        """One array of training (or whole-pipeline) jobs, and with eval_as_job the evaluation jobs that follow
        them; the ids of the arrays submitted."""
        sp = self.profile.slurm
        evaluated = [i for i in chunk if sp.eval_as_job and needs_eval_job(i.spec)]
        trained = [i for i in evaluated if RunDir(i.run_dir).stage_done("train")]  # evaluation only, at once
        train = [i for i in chunk if i not in trained]
        arrays = []
        if train:
            part = "train" if sp.eval_as_job else "all"
            arrays.append(self._array(train, root, part=part, after=after))
        follow = [i for i in train if i in evaluated]
        if trained:
            arrays.append(self._array(trained, root, part="after-train", after=None))
        if follow and len(follow) == len(train) and len(train) > 1:  # task i follows training task i
            arrays.append(self._array(follow, root, part="after-train", after=f"aftercorr:{arrays[0]}"))
        else:
            for item in follow:  # a single job is no array; a subset of an array has other task numbers
                arrays.append(self._array([item], root, part="after-train", after=f"afterok:{item.claim.job_id}"))
        return arrays

    def _array(self, items: list[Item], root: Path, *, part: str, after: str | None) -> str:
        """Submit one array (one job when alone) of `part`; its claims get the job ids; returns the array id."""
        from exoformer.runs.pipeline import PipelineJob

        executor = self._executor(root, items[0].spec, len(items), part=part, after=after)
        with executor.batch():
            jobs = [executor.submit(PipelineJob(), str(i.run_dir), i.spec, "slurm", part) for i in items]
        for item, job in zip(items, jobs):
            if part == "after-train":
                item.claim.eval_job_id = str(job.job_id)
            if part != "after-train" or item.claim.job_id is None:  # no training job: this one is the run's
                self._claimed(item, root, str(job.job_id))
        return array_id(str(jobs[0].job_id))

    def _submit_link(self, rest: list[Item], root: Path, *, after: str) -> None:
        executor = self._executor(root, rest[0].spec, 1, part="link", after=after)
        job = executor.submit(SubmitRest(), str(root), [(i.spec, str(i.run_dir)) for i in rest], self.profile)
        for item in rest:
            self._claimed(item, root, str(job.job_id))

    def _claimed(self, item: Item, root: Path, job_id: str) -> None:
        item.claim.job_id, item.claim.folder = job_id, str(root / JOBS_DIR / job_id)
        item.claim.poll_s = float(self.profile.slurm.poll_interval_s)


def needs_eval_job(spec: Spec) -> bool:
    """Whether the spec runs any stage after training (else its training job is the whole run)."""
    from exoformer.registry.spec import wanted_stages

    return any(stage != "train" for stage in wanted_stages(spec))


def chunk_sizes(n_runs: int, *, jobs_per_run: int, max_array_size: int, room: int | None) -> tuple[list[int], bool]:
    """(sizes of the arrays to submit now, whether a link job must carry the rest).

    Every array stays within `max_array_size` tasks. When the whole plan fits the `room` left in the user's
    queue (None: no limit), all of it goes now. Else the arrays that fit go now, less one job kept for the link."""
    if room is None or n_runs * jobs_per_run <= room:
        return [min(max_array_size, n_runs - i) for i in range(0, n_runs, max_array_size)], False
    sizes, left, free = [], n_runs, room - 1
    while left and free >= jobs_per_run:
        take = min(max_array_size, left, free // jobs_per_run)
        sizes.append(take)
        left -= take
        free -= take * jobs_per_run
    return sizes, bool(sizes) and left > 0


class SubmitRest:
    """The link job: once the arrays before it have left the queue, it submits the next arrays of its runs (and
    the next link) under the runs root's launch lock. A run is skipped when its claim no longer names this link
    (`run` again, or --force, took it over)."""

    def __call__(self, root: str, runs: list[tuple[Spec, str]], profile: Profile) -> list[str]:
        import submitit

        own = str(submitit.JobEnvironment().job_id)
        backend = SlurmBackend(profile)
        with locking.launch_lock(Path(root)):
            manifest = locking.read_manifest(Path(root))
            items = []
            for spec, run_dir in runs:
                claim = manifest.get(spec.hash)
                status = RunDir(Path(run_dir)).read_status()
                if claim is not None and claim.job_id == own and status is not None and status.state == "PENDING":
                    claim.job_id = claim.eval_job_id = None  # the arrays submitted now name the run's jobs
                    items.append(Item(spec=spec, run_dir=Path(run_dir), claim=claim))
            if items:
                queued = queued_count(SlurmView().queue())  # this link among them: it counts until it ends
                backend.submit(items, Path(root), record=lambda claims: locking.record_claims(Path(root), manifest,
                                                                                              claims), queued=queued)
        for line in backend.notes:
            print(line, flush=True)
        return backend.notes


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
