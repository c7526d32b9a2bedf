"""A shared cluster's limits, without a cluster: arrays within MaxArraySize and the user's queued-job limit,
Slurm asked a bounded number of times per reconciliation, transient controller errors retried, and pending
reasons in words. The real-Slurm proof is tests/slurm/test_site_limits.py."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exoformer.errors import UserError
from exoformer.registry.profiles import load_profile
from exoformer.runs import locking
from exoformer.runs.backends import Item
from exoformer.runs.backends import slurm_query
from exoformer.runs.backends.slurm import SlurmBackend, chunk_sizes
from exoformer.runs.backends.slurm_query import SiteLimits, SlurmView, is_transient, site_limits, waiting_words


@pytest.mark.parametrize("n", [1, 7, 8, 9, 30, 600, 2001])
@pytest.mark.parametrize("max_array", [1, 8, 1001])
@pytest.mark.parametrize("room", [None, 2, 6, 1000])
@pytest.mark.parametrize("per_run", [1, 2])
def test_chunks_stay_within_every_limit(n, max_array, room, per_run):
    sizes, link = chunk_sizes(n, jobs_per_run=per_run, max_array_size=max_array, room=room)
    assert all(1 <= size <= max_array for size in sizes)
    assert sum(sizes) <= n
    queued = sum(sizes) * per_run + link
    if room is not None:
        assert queued <= room  # the link job counts too
    if room is None or n * per_run <= room:
        assert sum(sizes) == n and not link  # all of it now, no link
    elif sizes:
        assert link and sum(sizes) < n
        assert (room - 1 - sum(sizes) * per_run) < per_run or max_array * len(sizes) == sum(sizes)
    else:
        assert room - 1 < per_run  # no room for one run beside its link: refused by check()


@dataclass
class FakeRun:
    """Answers of a stubbed Slurm client, and every command line it was given."""

    queue_lines: list[str] = field(default_factory=list)
    accounting: dict[str, tuple[str, str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)

    def __call__(self, args, **kwargs):
        self.calls.append(list(args))
        if self.failures:
            return subprocess.CompletedProcess(args, 1, "", self.failures.pop(0))
        if args[0] == "squeue":
            return subprocess.CompletedProcess(args, 0, "\n".join(self.queue_lines) + "\n", "")
        if args[0] == "sacct":
            asked = set(args[args.index("-j") + 1].split(",")) if "-j" in args else None
            rows = [f"{j}|{s}|{c}" for j, (s, c) in self.accounting.items()
                    if asked is None or j.split("_")[0] in asked]
            return subprocess.CompletedProcess(args, 0, "\n".join(rows) + "\n", "")
        raise AssertionError(args)


def _claims(n: int, *, arrays_of: int = 1000):
    claims = []
    for i in range(n):
        claim = locking.Claim(hash=f"h{i}", name=f"s{i}", run_dir=f"/r/{i}", backend="slurm", host="login",
                              launcher_pid=1, submitted=1_700_000_000.0 + i)
        claim.job_id = f"{9000 + i // arrays_of}_{i % arrays_of}"
        claims.append(claim)
    return claims


@pytest.mark.parametrize("n", [10, 600, 6000])
def test_one_reconciliation_asks_slurm_twice_whatever_the_number_of_jobs(monkeypatch, n):
    claims = _claims(n)
    queued = claims[: n // 2]
    fake = FakeRun(queue_lines=[f"{c.job_id}|PENDING|Priority|2026-12-03T10:00:00" for c in queued],
                   accounting={c.job_id: ("CANCELLED by 0", "0:15") for c in claims[n // 2:]})
    monkeypatch.setattr(slurm_query.subprocess, "run", fake)
    view = SlurmView(delays=())
    view.expect(claims)
    for claim in claims:
        if claim.job_id not in (view.queue() or {}):
            assert view.final_state(claim.job_id) == "CANCELLED by 0 (exit 0:15)"
    assert [c[0] for c in fake.calls] == ["squeue", "sacct"]
    squeue = fake.calls[0]
    assert squeue[squeue.index("-u") + 1] == slurm_query.slurm_user() and "-j" not in squeue  # per-user listing
    assert view.queued(claims[0].job_id).reason == "Priority"


def test_a_long_id_list_becomes_one_sacct_by_user_and_start_time(monkeypatch):
    claims = _claims(3000, arrays_of=1)  # 3,000 single jobs: an id list past SACCT_IDS_CHARS
    fake = FakeRun(accounting={c.job_id: ("TIMEOUT", "0:0") for c in claims})
    monkeypatch.setattr(slurm_query.subprocess, "run", fake)
    view = SlurmView(delays=())
    view.expect(claims)
    assert all(view.final_state(c.job_id) == "TIMEOUT (exit 0:0)" for c in claims)
    sacct = [c for c in fake.calls if c[0] == "sacct"]
    assert len(sacct) == 1 and "-u" in sacct[0] and "-S" in sacct[0] and "-j" not in sacct[0]


def test_transient_errors_are_retried_then_reported_in_one_line(monkeypatch):
    sleeps = []
    monkeypatch.setattr(slurm_query.time, "sleep", sleeps.append)
    fake = FakeRun(queue_lines=["5_0|RUNNING|None|2026-12-03T10:00:00"],
                   failures=["slurm_load_jobs error: Socket timed out on send/recv operation"] * 2)
    monkeypatch.setattr(slurm_query.subprocess, "run", fake)
    view = SlurmView(delays=(1.0, 2.0, 4.0))
    assert view.queue() == {"5_0": slurm_query.QueuedJob(state="RUNNING", reason=None,
                                                         submitted=view.queue()["5_0"].submitted)}
    assert len(fake.calls) == 3 and view.problem is None
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] < 1.5 and 1.0 <= sleeps[1] < 3.0  # backoff with jitter

    fake = FakeRun(failures=["Unable to contact slurm controller (connect failure)"] * 9)
    monkeypatch.setattr(slurm_query.subprocess, "run", fake)
    view = SlurmView(delays=(1.0, 2.0))
    assert view.queue() is None and view.queue() is None  # asked once per reconciliation, not per run
    assert len(fake.calls) == 3
    assert view.problem == ("squeue did not answer after 3 tries: Unable to contact slurm controller "
                            "(connect failure)")


def test_a_refusal_is_not_retried():
    assert not is_transient("slurm_load_jobs error: Invalid job id specified")
    assert not is_transient("sbatch: error: Batch job submission failed: Invalid job array specification")
    assert is_transient("slurm_load_jobs error: Socket timed out on send/recv operation")
    assert is_transient("sacct: error: slurmdbd: Connection refused")


@pytest.mark.parametrize("reason,words", [
    ("Priority", "other jobs come first (priority) [Priority]"),
    ("Dependency", "waits for the jobs it follows [Dependency]"),
    ("QOSMaxSubmitJobPerUserLimit", "held by a limit of the QOS (queued jobs per user) [QOSMaxSubmitJobPerUserLimit]"),
    ("QOSMaxJobsPerUserLimit", "held by a limit of the QOS (running jobs) [QOSMaxJobsPerUserLimit]"),
    ("AssocGrpGRES", "held by a limit of your account (GPUs) [AssocGrpGRES]"),
    ("JobArrayTaskLimit", "held by the array's throttle (array_parallelism) [JobArrayTaskLimit]"),
    ("SomethingNew", "queued [SomethingNew]"),
    (None, "queued"),
])
def test_pending_reasons_in_words(reason, words):
    assert waiting_words(reason) == words


def test_limits_come_from_the_cluster_unless_the_profile_names_them(monkeypatch):
    answers = {
        ("scontrol", "show", "config"): "MaxArraySize            = 8\nMaxJobCount             = 10000\n",
        ("sacctmgr", "show", "assoc"): "|normal\n",
        ("sacctmgr", "show", "qos"): "capped|6\n",
    }

    def fake(*args, **kwargs):
        key = tuple(a for a in args if a in ("scontrol", "show", "config", "sacctmgr", "assoc", "qos"))
        return answers[key[:3]]

    monkeypatch.setattr(slurm_query, "slurm_command", fake)
    limits = site_limits(max_array_size=None, max_submit=None, qos="capped")
    assert (limits.max_array_size, limits.max_submit) == (8, 6)
    assert "scontrol" in limits.source and "sacctmgr" in limits.source
    limits = site_limits(max_array_size=100, max_submit=50, qos="capped")
    assert (limits.max_array_size, limits.max_submit) == (100, 50) and "profile" in limits.source
    answers[("sacctmgr", "show", "qos")] = "capped|\n"  # no limit on that QOS
    assert site_limits(max_array_size=None, max_submit=None, qos="capped").max_submit is None


class RecordingBackend(SlurmBackend):
    """The slurm backend with sbatch replaced by a log of the arrays it would submit."""

    def __init__(self, profile, limits):
        super().__init__(profile)
        self._limits = {None: limits, profile.slurm.qos: limits}
        self.arrays: list[tuple[str, int, str | None]] = []

    def _array(self, items, root, *, part, after):
        array = str(100 + len(self.arrays))
        self.arrays.append((part, len(items), after))
        for i, item in enumerate(items):
            if part == "after-train":
                item.claim.eval_job_id = f"{array}_{i}"
            if part != "after-train" or item.claim.job_id is None:
                self._claimed(item, root, f"{array}_{i}")
        return array

    def _submit_link(self, rest, root, *, after):
        self.arrays.append(("link", len(rest), after))
        for item in rest:
            self._claimed(item, root, "999")


def _items(tmp_path: Path, n: int):
    from exoformer.registry.registry import Registry

    spec = Registry().resolve("base-s42", preset="smoke")
    items = []
    for i in range(n):
        claim = locking.new_claim(spec_hash=f"{i:064x}", name=spec.name, run_dir=tmp_path / str(i), backend="slurm")
        items.append(Item(spec=spec, run_dir=tmp_path / str(i), claim=claim))
    return items


def test_a_plan_past_both_limits_goes_in_as_chained_arrays_and_a_link(tmp_path):
    backend = RecordingBackend(load_profile("testcluster"), SiteLimits(max_array_size=8, max_submit=None, source=""))
    items = _items(tmp_path, 30)
    recorded = []
    backend.submit(items, tmp_path, record=recorded.extend, queued=0)
    assert backend.arrays == [("all", 8, None), ("all", 8, "afterany:100"), ("all", 8, "afterany:101"),
                              ("all", 6, "afterany:102")]
    assert len({c.job_id for c in recorded}) == 30 == len(recorded)

    backend = RecordingBackend(load_profile("testcluster"), SiteLimits(max_array_size=8, max_submit=6, source=""))
    items = _items(tmp_path, 30)
    backend.submit(items, tmp_path, record=lambda claims: None, queued=0)
    assert backend.arrays == [("all", 5, None), ("link", 25, "afterany:100")]
    assert [i.claim.job_id for i in items[5:]] == ["999"] * 25 and all(i.claim.poll_s == 30 for i in items)

    backend = RecordingBackend(load_profile("testcluster", {"slurm.eval_as_job": True, "slurm.eval_gpus_per_node": 0}),
                               SiteLimits(max_array_size=8, max_submit=6, source=""))
    items = _items(tmp_path, 30)
    backend.submit(items, tmp_path, record=lambda claims: None, queued=1)
    assert backend.arrays == [("train", 2, None), ("after-train", 2, "aftercorr:100"), ("link", 28, "afterany:100:101")]
    assert (items[0].claim.job_id, items[0].claim.eval_job_id) == ("100_0", "101_0")


def test_no_room_in_the_queue_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    backend = RecordingBackend(load_profile("testcluster"), SiteLimits(max_array_size=8, max_submit=6, source="x"))
    monkeypatch.setattr(slurm_query.SlurmView, "queue", lambda self: {str(i): slurm_query.QueuedJob(state="PENDING") for i in range(5)})
    with pytest.raises(UserError, match="no room in the queue: 5 of your jobs are queued and the site allows 6"):
        backend._check_room([items.spec for items in _items(tmp_path, 3)])
