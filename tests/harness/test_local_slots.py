"""How many local jobs run side by side, and the wall-time model that chooses it (exoformer/budget/cost.py
local_wall_seconds, balanced_slots; exoformer/runs/backends/local.py default_concurrency)."""

from __future__ import annotations

import random

import pytest

from exoformer.budget.cost import balanced_slots, local_wall_seconds
from exoformer.runs.backends import local as local_backend
from exoformer.runs.backends.local import LocalBackend


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


def test_jobs_sharing_fewer_cores_lose_no_work():
    """While at least `cores` jobs run, the cores are never idle: n equal jobs all side by side take n/cores."""
    assert local_wall_seconds([1.0] * 9, 2, cores=2) == pytest.approx(5.0)  # the ninth alone
    assert local_wall_seconds([1.0] * 9, 3, cores=2) == pytest.approx(4.5)
    assert local_wall_seconds([1.0] * 9, 9, cores=2) == pytest.approx(4.5)
    assert local_wall_seconds([3.0, 1.0], 2, cores=1) == pytest.approx(4.0)  # both at half speed, then one alone
    assert local_wall_seconds([3.0, 1.0], 2, cores=1, serial_s=2.5) == pytest.approx(6.5)
    rng = random.Random(4)
    for _ in range(100):
        jobs = [rng.uniform(1, 100) for _ in range(rng.randint(1, 12))]
        cores = rng.randint(1, 4)
        slots = rng.randint(cores, 8)
        wall = local_wall_seconds(jobs, slots, cores=cores)
        assert wall >= sum(jobs) / cores - 1e-6 and wall >= max(jobs) - 1e-6
        assert wall <= sum(jobs) + 1e-6


def test_slots_keep_every_core_busy_to_the_end_when_they_can():
    assert balanced_slots(9, 2) == 3  # the README's main job: 4.5 job-lengths instead of 5
    assert [balanced_slots(n, 2) for n in range(1, 13)] == [2, 2, 3, 2, 3, 2, 4, 2, 3, 2, 3, 2]
    for cores in (1, 2, 4, 8):
        for n in range(1, 40):
            slots = balanced_slots(n, cores)
            assert cores <= slots <= max(cores, 2 * cores)
            best = local_wall_seconds([1.0] * n, slots, cores=cores)
            assert best <= local_wall_seconds([1.0] * n, cores, cores=cores) + 1e-9  # never worse than one per core
            for other in range(cores, min(n, 2 * cores) + 1):
                assert best <= local_wall_seconds([1.0] * n, other, cores=cores) + 1e-9


def test_the_local_backend_sizes_its_slots_from_the_plan_unless_told(monkeypatch):
    monkeypatch.setattr(local_backend.os, "cpu_count", lambda: 2)
    assert LocalBackend(expected_jobs=9).concurrency == 3
    assert LocalBackend(expected_jobs=4).concurrency == 2
    assert LocalBackend().concurrency == 2
    assert LocalBackend(concurrency=1, expected_jobs=9).concurrency == 1  # --jobs wins
    assert LocalBackend(expected_jobs=9).parallel_jobs == 3  # the progress line divides the work by it
