"""How many local jobs run side by side (exoformer/budget/cost.py local_slots; exoformer/runs/backends/local.py), and
the wall-time model that chooses it (local_wall_seconds below)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from exoformer.budget.cost import CPU_SHARING_SLOWDOWN, local_slots
from exoformer.runs.backends import local as local_backend
from exoformer.runs.backends.local import LocalBackend


def local_wall_seconds(job_seconds: list[float], slots: int | None = None, *, cores: int | None = None,
                       serial_s: float = 0.0, slowdown: float = CPU_SHARING_SLOWDOWN) -> float:
    """Wall seconds of jobs run as the local backend runs them: in queue order, each to the first free slot, with
    `slots` one-thread jobs side by side (None: as many as local_slots allows at each start) on `cores` cores
    (default: one core per slot), plus `serial_s` (the launcher's start and the table after the jobs). A job alone
    on a core takes its `job_seconds`; when more jobs run than there are cores they share them evenly, as the
    kernel's scheduler does, each at cores/running of its speed divided by `slowdown`."""
    if slots is None and cores is None:
        raise ValueError("local_wall_seconds needs the cores when the slots follow local_slots")
    cores = max(1, cores or slots)
    queue, running, now = list(job_seconds), [], 0.0  # running: CPU seconds each job still needs
    while queue or running:
        if slots is None:
            allowed = local_slots(len(queue), len(running), cores, slowdown=slowdown)
        else:
            allowed = max(1, slots)
        while queue and len(running) < allowed:
            running.append(float(queue.pop(0)))
        speed = 1.0 if len(running) <= cores else cores / len(running) / slowdown
        step = min(running) / speed
        now += step
        running = [left - step * speed for left in running]
        running = [left for left in running if left > 1e-9]
    return now + serial_s


def greedy_one_core_each(jobs: list[float], slots: int) -> float:
    """List scheduling with a core per slot: each job in order to the slot that frees first."""
    ends = [0.0] * slots
    for seconds in jobs:
        ends[ends.index(min(ends))] += seconds
    return max(ends)


def test_with_a_core_per_slot_the_wall_time_is_list_scheduling():
    rng = random.Random(3)
    for _ in range(200):
        jobs = [rng.uniform(1, 100) for _ in range(rng.randint(1, 12))]
        slots = rng.randint(1, 5)
        assert local_wall_seconds(jobs, slots) == pytest.approx(greedy_one_core_each(jobs, slots))
        assert local_wall_seconds(jobs, slots, cores=slots + 3) == pytest.approx(greedy_one_core_each(jobs, slots))


def test_jobs_sharing_fewer_cores_lose_no_work_but_what_sharing_costs():
    """While at least `cores` jobs run, the cores are never idle: n equal jobs all side by side take n/cores, times
    the slowdown of sharing."""
    assert local_wall_seconds([1.0] * 9, 2, cores=2) == pytest.approx(5.0)  # the ninth alone
    assert local_wall_seconds([1.0] * 9, 3, cores=2, slowdown=1.0) == pytest.approx(4.5)
    assert local_wall_seconds([1.0] * 9, 9, cores=2, slowdown=1.0) == pytest.approx(4.5)
    assert local_wall_seconds([1.0] * 9, 3, cores=2) == pytest.approx(4.5 * CPU_SHARING_SLOWDOWN)
    assert local_wall_seconds([3.0, 1.0], 2, cores=1, slowdown=1.0) == pytest.approx(4.0)  # half speed, then alone
    assert local_wall_seconds([3.0, 1.0], 2, cores=1, serial_s=2.5, slowdown=1.0) == pytest.approx(6.5)
    assert local_wall_seconds([3.0, 1.0], 2, cores=1, slowdown=1.5) == pytest.approx(3.0 + 2.0)  # at 1/3: 3 s, then 2 alone
    rng = random.Random(4)
    for _ in range(100):
        jobs = [rng.uniform(1, 100) for _ in range(rng.randint(1, 12))]
        cores = rng.randint(1, 4)
        slots = rng.choice([None, rng.randint(cores, 8)])
        slowdown = rng.choice([1.0, CPU_SHARING_SLOWDOWN, 1.5])
        wall = local_wall_seconds(jobs, slots, cores=cores, slowdown=slowdown)
        assert wall >= sum(jobs) / cores - 1e-6 and wall >= max(jobs) - 1e-6
        assert wall <= sum(jobs) * slowdown + 1e-6


def test_one_job_per_core_until_the_last_jobs_share_the_cores():
    assert [local_slots(queued, 0, 2) for queued in range(1, 8)] == [2, 2, 3, 2, 2, 2, 2]
    assert local_slots(2, 1, 2) == 3 and local_slots(3, 1, 2) == 2  # the left-over jobs count, running or queued
    assert [local_slots(queued, 0, 4) for queued in range(3, 10)] == [4, 4, 5, 6, 7, 4, 4]
    assert local_slots(5, 0, 1) == 1  # one core: never two at once
    # the README's main job: three rounds of two, then the last three side by side
    assert local_wall_seconds([1.0] * 9, cores=2) == pytest.approx(3 + 1.5 * CPU_SHARING_SLOWDOWN)


def test_the_slot_policy_beats_every_fixed_number_of_slots_on_equal_jobs():
    """Against one job per core and against every fixed count up to twice the cores, for every queue length, at
    the measured slowdown of sharing and at none: never worse."""
    for slowdown in (1.0, CPU_SHARING_SLOWDOWN):
        for cores in (1, 2, 4, 8):
            for n in range(1, 40):
                jobs = [1.0] * n
                policy = local_wall_seconds(jobs, cores=cores, slowdown=slowdown)
                fixed = {slots: local_wall_seconds(jobs, slots, cores=cores, slowdown=slowdown)
                         for slots in range(cores, 2 * cores + 1)}
                assert policy <= min(fixed.values()) + 1e-9, (slowdown, cores, n)
    nine = [1.0] * 9  # the main job: better than three side by side throughout, and than two
    assert local_wall_seconds(nine, cores=2) < local_wall_seconds(nine, 3, cores=2) < local_wall_seconds(nine, 2)


def test_the_policy_on_jobs_of_unequal_length_is_never_worse_than_one_per_core():
    rng = random.Random(5)
    for _ in range(300):
        cores = rng.randint(1, 4)
        base = rng.uniform(50, 100)
        jobs = [base * rng.uniform(0.8, 1.25) for _ in range(rng.randint(1, 14))]  # the nine models: within 30%
        policy = local_wall_seconds(jobs, cores=cores)
        assert policy <= local_wall_seconds(jobs, cores, cores=cores) * 1.1 + 1e-6


def test_the_local_backend_follows_the_policy_unless_told(monkeypatch):
    monkeypatch.setattr(local_backend.os, "cpu_count", lambda: 2)
    backend = LocalBackend()
    assert backend.concurrency is None and backend.parallel_jobs == 2  # the progress line divides the work by it
    assert [backend._slots(queued, 0) for queued in (9, 3, 2)] == [2, 3, 2]
    told = LocalBackend(concurrency=1)
    assert told.parallel_jobs == 1 and told._slots(2, 0) == 1  # --jobs wins


def test_the_launch_loop_starts_jobs_as_the_policy_says(monkeypatch, tmp_path):
    """Nine jobs on two cores through LocalBackend.launch with a fake executor whose jobs end when told: two at
    first, one more as each job ends, until the two left start beside the one still running."""
    monkeypatch.setattr(local_backend.os, "cpu_count", lambda: 2)
    events = []

    class FakeJob:
        def __init__(self, n):
            self.job_id, self.n, self.finished = str(1000 + n), n, False
            self.paths = type("Paths", (), {"folder": tmp_path / str(n)})()

        def done(self):
            return self.finished

    started = []

    class Claim:
        job_id = folder = None

    class FakeItem:
        def __init__(self, n):
            self.n, self.claim = n, Claim()
            self.spec = SimpleNamespace(name=f"spec-{n}", train=SimpleNamespace(is_branch=False))  # no decay branch

    def fake_submit(executor, job_items):
        (item,) = job_items  # no decay branch follows a run in its job
        job = FakeJob(item.n)
        started.append(job)
        events.append(("start", item.n, sum(not j.finished for j in started)))
        return job

    backend = LocalBackend(poll_s=0.0)
    monkeypatch.setattr(backend, "_executor", lambda root: None)
    monkeypatch.setattr(local_backend, "_submit_deaf_to_ctrl_c", fake_submit)
    monkeypatch.setattr(local_backend.time, "sleep", lambda s: _finish_oldest(started))
    backend.launch([FakeItem(n) for n in range(9)], tmp_path)
    at_start = [running for kind, _, running in events if kind == "start"]
    assert at_start == [1, 2, 2, 2, 2, 2, 2, 2, 3]  # jobs running once each has started, itself included


def _finish_oldest(started) -> None:
    """One poll of the fake clock: the oldest running job ends."""
    for job in started:
        if not job.finished:
            job.finished = True
            return
