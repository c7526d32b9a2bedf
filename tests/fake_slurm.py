"""A fake Slurm on PATH: `squeue`, `sacct`, `sbatch`, `scancel`, `scontrol`, `sacctmgr`, `sinfo` as small Python
scripts over a state directory, so that tests and benchmarks drive the real client code paths without a cluster.

Why scripts and not monkeypatching: the harness calls Slurm through subprocess, and the cost we care about is
the number of client commands and the lines they print. Each call here is a new Python process (its start-up
stands in for a client's RPC to the controller), and a full-queue listing really formats every line.

    cluster = make_fake_cluster(tmp, user="me", others=1000, ours={"5000_0": "PENDING"},
                                accounting={"5000_1": ("CANCELLED by 0", "0:15")})
    subprocess.run(["squeue", "-h", "-r", "--me", "-o", "%i|%T"], env=cluster.env())
    cluster.calls()        # [["squeue", "-h", "-r", "--me", "-o", "%i|%T"]]

What the scripts answer (anything else: an empty answer, never a guess at Slurm's error text):

- squeue: `-h/--noheader`, `-r/--array` (arrays are always listed one task per line, `A_i`), `-u/--user U[,U]`,
  `--me`, `-j/--jobs ID[,ID]` (a master id `A` matches its tasks `A_i`; nothing found: exit 1
  "slurm_load_jobs error: Invalid job id specified"), `-t/--states S[,S]`, `-o/--format FMT` with `%i %A %F %K
  %T %t %r %R %V %u %j %P %M %D %a %q` (%A and %F: the array's master id) and widths (`%.18i` right-,
  `%18i` left-justified); other codes print nothing. Without `-o` the default columns of squeue.
- sacct: `-X/--allocations` (without it each ended job also has `.batch` and `.extern` steps), `-n/--noheader`,
  `-P/--parsable2`, `-p/--parsable`, `-j/--jobs LIST` (comma-separated; master ids cover their tasks),
  `-u/--user U`, `-a/--allusers`, `-S/--starttime T` (ISO time; other forms are not filtered on),
  `-s/--state S[,S]`, `-o/--format F[,F]` with JobID, JobIDRaw, State, ExitCode, Submit, Start, End, User,
  JobName, Elapsed (other fields empty). Rows: the `accounting` jobs and our queued jobs (PENDING/RUNNING,
  exit `0:0`), as real sacct also lists jobs that have not ended. Without -j and -u: our user's rows.
- sbatch: `[options] SCRIPT`; options from argv and the script's `#SBATCH` lines: `-a/--array` (`0-K`, `0-K%P`,
  `0-K:S`, `1,3,5`), `--parsable`, `-J/--job-name`, `-d/--dependency` (tasks wait on reason `Dependency`).
  Answers `Submitted batch job N` (or `N`); queues every task PENDING. Refuses an index >= max_array_size
  ("Invalid job array specification") and a submission past max_submit queued jobs of ours
  ("QOSMaxSubmitJobPerUserLimit").
- scancel ID...: our job (master id: all its tasks) leaves the queue, accounted `CANCELLED by <uid>`, `0:15`.
- scontrol: `show config` (MaxArraySize, MaxJobCount, ...), `show job ID` (one line per task).
- sacctmgr: `-n -P show qos [...] format=...` (Name, MaxSubmitPU, MaxJobsPU, MaxSubmitPA, MaxWall, Priority)
  and `show assoc [...] format=...` (Cluster, Account, User, Partition, QOS, MaxSubmit, MaxJobs): one row, the
  limit is max_submit (empty when None). Without -P the columns are space-separated.
- sinfo: `-h -o FMT` with `%G` -> `(null)`, `%R` -> `debug`, `%P` -> `debug*`, `%a` -> `up`, `%D`, `%N`, `%c`.

Every call is logged to state_dir/calls.jsonl as one line {"argv", "seconds", "rc", "lines", "t"}: seconds is
the script's own run time after its Python start-up, lines what it printed.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

COMMANDS = ("squeue", "sacct", "sbatch", "scancel", "scontrol", "sacctmgr", "sinfo")
TIMEOUT_MESSAGE = "slurm_load_jobs error: Socket timed out on send/recv operation"
SUBMIT_EPOCH = 1_780_000_000  # submit times of the fake's jobs count from here (2026-05-28)
_FIELDS = ("id", "state", "reason", "submit", "user", "name")  # one job per line in queue/<user>.tsv


@dataclass
class FakeCluster:
    """A fake Slurm: scripts in `bin_dir`, jobs and the call log in `state_dir`."""

    bin_dir: Path
    state_dir: Path
    user: str

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default os.environ) with bin_dir first on PATH, FAKE_SLURM_STATE, and USER/LOGNAME set to our
        user (getpass.getuser() reads LOGNAME first)."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["FAKE_SLURM_STATE"] = str(self.state_dir)
        env["USER"] = env["LOGNAME"] = self.user
        return env

    def call_log(self) -> list[dict]:
        """Every call so far: {"argv", "seconds", "rc", "lines", "t"} in the order they ended."""
        path = self.state_dir / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def calls(self) -> list[list[str]]:
        """argv of every call so far (argv[0] is the bare command name)."""
        return [entry["argv"] for entry in self.call_log()]

    def reset_calls(self) -> None:
        (self.state_dir / "calls.jsonl").unlink(missing_ok=True)

    def fail_next(self, n: int, message: str = TIMEOUT_MESSAGE) -> None:
        """The next n calls (any command) exit 1 with `message` on stderr and print nothing: a busy controller."""
        _write_json(self.state_dir / "fail_next.json", {"n": n, "message": message})

    def queue(self) -> dict[str, str]:
        """Our queued jobs: id -> state (what sbatch and scancel left)."""
        return {job["id"]: job["state"] for job in _read_jobs(self.state_dir / "queue" / f"{self.user}.tsv")}


def make_fake_cluster(root: Path, *, user: str, others: int = 0, ours: dict[str, str] | None = None,
                      accounting: dict[str, tuple[str, str]] | None = None, max_array_size: int = 1001,
                      max_submit: int | None = None, pending_reasons: dict[str, str] | None = None,
                      max_job_count: int = 10000, seed: int = 0) -> FakeCluster:
    """A fake cluster under `root` (root/bin, root/state).

    ours: our job ids (`5000_3` for an array task) -> PENDING or RUNNING; pending_reasons: id -> reason
    (default Priority; RUNNING shows None). others: that many jobs of other users (about 200 users, arrays
    and single jobs, mostly PENDING, seeded). accounting: id -> (State, ExitCode) of our ended jobs."""
    root = Path(root)
    bin_dir, state = root / "bin", root / "state"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (state / "queue").mkdir(parents=True, exist_ok=True)
    (state / "scripts").mkdir(exist_ok=True)
    pending_reasons = pending_reasons or {}
    ours = ours or {}
    mine = []
    for i, (job_id, st) in enumerate(ours.items()):
        reason = "None" if st != "PENDING" else pending_reasons.get(job_id, "Priority")
        mine.append((job_id, st, reason, _iso(SUBMIT_EPOCH + 3600 + i), user, "exo-grid"))
    _write_jobs(state / "queue" / f"{user}.tsv", mine)
    by_user: dict[str, list[tuple]] = {}
    rng = random.Random(seed)
    users = [f"u{n:04d}" for n in range(200)]
    next_id, made = 100_000, 0
    while made < others:
        owner = rng.choice(users)
        size = min(others - made, rng.choice((1, 1, 1, 1, 10, 50, 200)))
        for task in range(size):
            job_id = str(next_id) if size == 1 else f"{next_id}_{task}"
            st = rng.choices(("PENDING", "RUNNING", "COMPLETING"), (70, 28, 2))[0]
            reason = rng.choice(("Priority", "Priority", "Resources", "Dependency",
                                 "QOSMaxSubmitJobPerUserLimit")) if st == "PENDING" else "None"
            by_user.setdefault(owner, []).append((job_id, st, reason, _iso(SUBMIT_EPOCH + made), owner, "job"))
            made += 1
        next_id += 1
    for owner, jobs in by_user.items():
        _write_jobs(state / "queue" / f"{owner}.tsv", jobs)
    acct = []
    for i, (job_id, (st, code)) in enumerate((accounting or {}).items()):
        acct.append({"id": job_id, "state": st, "exit": code, "submit": _iso(SUBMIT_EPOCH + i),
                     "start": _iso(SUBMIT_EPOCH + 60 + i), "end": _iso(SUBMIT_EPOCH + 600 + i), "user": user,
                     "name": "exo-grid"})
    _write_json(state / "accounting.json", acct)
    ours_ids = [j[0] for j in mine] + [a["id"] for a in acct]
    first_free = max([next_id, *(int(i.split("_")[0]) + 1 for i in ours_ids)])
    _write_json(state / "config.json", {"user": user, "max_array_size": max_array_size, "max_submit": max_submit,
                                        "max_job_count": max_job_count, "next_job_id": first_free})
    shutil.copyfile(Path(__file__), bin_dir / "_fake_slurm.py")
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    for name in COMMANDS:
        script = bin_dir / name
        script.write_text(f"#!{python}\nimport sys\nsys.path.insert(0, {str(bin_dir)!r})\n"
                          f"import _fake_slurm\nsys.exit(_fake_slurm.main({name!r}, sys.argv[1:]))\n")
        script.chmod(0o755)
    return FakeCluster(bin_dir=bin_dir, state_dir=state, user=user)


# ------------------------------------------------------------------------------------------- state files

def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))


def _write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _write_jobs(path: Path, jobs) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join("\t".join(job) + "\n" for job in jobs))
    os.replace(tmp, path)


def _read_jobs(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [dict(zip(_FIELDS, line.split("\t"))) for line in text.splitlines() if line]


class _Locked:
    """An exclusive flock on state/lock: sbatch, scancel and fail_next change shared files."""

    def __init__(self, state: Path) -> None:
        self.path = state / "lock"

    def __enter__(self):
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


# ---------------------------------------------------------------------------------------------- the scripts

class _Exit(Exception):
    def __init__(self, rc: int, message: str) -> None:
        super().__init__(message)
        self.rc, self.message = rc, message


def main(name: str, args: list[str]) -> int:
    """One invocation of command `name`: answer, log it, return its exit status."""
    start = time.perf_counter()
    state = Path(os.environ["FAKE_SLURM_STATE"])
    out, rc, err = [], 0, ""
    with _Locked(state):
        fail = state / "fail_next.json"
        pending = json.loads(fail.read_text()) if fail.exists() else {"n": 0}
        if pending["n"] > 0:
            pending["n"] -= 1
            _write_json(fail, pending)
            rc, err = 1, pending["message"]
    if rc == 0:
        try:
            out = _HANDLERS[name](state, args)
        except _Exit as stop:
            rc, err = stop.rc, stop.message
    text = "".join(line + "\n" for line in out)
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
    if err:
        sys.stderr.write(err + "\n")
    entry = {"argv": [name, *args], "seconds": round(time.perf_counter() - start, 6), "rc": rc, "lines": len(out),
             "t": time.time()}
    fd = os.open(state / "calls.jsonl", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)
    return rc


def _options(args: list[str], takes: dict[str, str], flags: dict[str, str]) -> tuple[dict, list[str]]:
    """(option name -> value or True, positional args) for `-x V`, `-xV`, `--long V`, `--long=V`."""
    got, rest, i = {}, [], 0
    while i < len(args):
        arg = args[i]
        key, value = arg, None
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 2 and arg[:2] in takes:
            key, value = arg[:2], arg[2:]
        if key in takes:
            if value is None:
                i += 1
                value = args[i] if i < len(args) else ""
            got[takes[key]] = value
        elif key in flags:
            got[flags[key]] = True
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 2 and all(f"-{c}" in flags
                                                                                      for c in arg[1:]):
            got.update({flags[f"-{c}"]: True for c in arg[1:]})  # -hr
        else:
            rest.append(arg)
        i += 1
    return got, rest


def _config(state: Path) -> dict:
    return json.loads((state / "config.json").read_text())


def _id_matches(job_id: str, wanted: set[str]) -> bool:
    return job_id in wanted or job_id.split("_", 1)[0] in wanted


_CODE = re.compile(r"%(\.?)(\d*)([a-zA-Z])")


def _formatter(fmt: str, values):
    """A function job -> line for a Slurm format string (literal text kept, widths applied)."""
    parts, pos = [], 0
    for m in _CODE.finditer(fmt):
        parts.append((None, fmt[pos:m.start()], False, 0))
        parts.append((m.group(3), "", m.group(1) == ".", int(m.group(2) or 0)))
        pos = m.end()
    parts.append((None, fmt[pos:], False, 0))

    def line(job) -> str:
        out = []
        for code, literal, right, width in parts:
            if code is None:
                out.append(literal)
                continue
            value = values(code, job)
            if width:
                value = value[:width].rjust(width) if right else value[:width].ljust(width)
            out.append(value)
        return "".join(out)

    return line


_SHORT = {"PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "COMPLETED": "CD", "CANCELLED": "CA"}


def _squeue_value(code: str, job: dict) -> str:
    job_id = job["id"]
    master, _, task = job_id.partition("_")
    return {"i": job_id, "A": master, "F": master, "K": task or "N/A",
            "T": job["state"], "t": _SHORT.get(job["state"], job["state"][:2]), "r": job["reason"],
            "R": f"({job['reason']})" if job["state"] == "PENDING" else "node-17", "V": job["submit"],
            "u": job["user"], "j": job["name"], "P": "debug", "M": "0:00" if job["state"] == "PENDING" else "1:00",
            "D": "1", "a": "default", "q": "normal"}.get(code, "")


def _squeue(state: Path, args: list[str]) -> list[str]:
    opts, _ = _options(args, {"-o": "format", "--format": "format", "-u": "user", "--user": "user",
                              "-j": "jobs", "--jobs": "jobs", "-t": "states", "--states": "states",
                              "-p": "partition", "--partition": "partition", "-M": "clusters"},
                       {"-h": "noheader", "--noheader": "noheader", "-r": "array", "--array": "array",
                        "--me": "me", "-a": "all", "--all": "all", "-l": "long", "--long": "long"})
    if opts.get("me"):
        opts["user"] = _config(state)["user"]
    queue = state / "queue"
    if opts.get("user"):
        files = [queue / f"{u}.tsv" for u in opts["user"].split(",")]
    else:
        files = sorted(queue.glob("*.tsv"))
    jobs = [job for path in files for job in _read_jobs(path)]
    if opts.get("jobs"):
        wanted = set(opts["jobs"].split(","))
        jobs = [job for job in jobs if _id_matches(job["id"], wanted)]
        if not jobs:
            raise _Exit(1, "slurm_load_jobs error: Invalid job id specified")
    if opts.get("states") and opts["states"].lower() != "all":
        keep = {s.upper() for s in opts["states"].split(",")}
        jobs = [job for job in jobs if job["state"] in keep or _SHORT.get(job["state"]) in keep]
    fmt = opts.get("format") or "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    line = _formatter(fmt, _squeue_value)
    out = [] if opts.get("noheader") else [_header(fmt)]
    out += [line(job) for job in jobs]
    return out


def _header(fmt: str) -> str:
    names = {"i": "JOBID", "A": "JOBID", "F": "ARRAY_JOB_ID", "K": "ARRAY_TASK_ID", "T": "STATE", "t": "ST",
             "r": "REASON", "R": "NODELIST(REASON)", "V": "SUBMIT_TIME", "u": "USER", "j": "NAME",
             "P": "PARTITION", "M": "TIME", "D": "NODES", "a": "ACCOUNT", "q": "QOS"}
    return _formatter(fmt, lambda code, _: names.get(code, code.upper()))(None)


_SACCT_FIELDS = {"jobid": "id", "jobidraw": "id", "state": "state", "exitcode": "exit", "submit": "submit",
                 "start": "start", "end": "end", "user": "user", "jobname": "name", "elapsed": "elapsed"}


def _sacct(state: Path, args: list[str]) -> list[str]:
    opts, _ = _options(args, {"-o": "format", "--format": "format", "-j": "jobs", "--jobs": "jobs",
                              "-u": "user", "--user": "user", "-S": "start", "--starttime": "start",
                              "-E": "end", "--endtime": "end", "-s": "states", "--state": "states",
                              "-M": "clusters"},
                       {"-X": "alloc", "--allocations": "alloc", "-n": "noheader", "--noheader": "noheader",
                        "-P": "parsable2", "--parsable2": "parsable2", "-p": "parsable", "--parsable": "parsable",
                        "-a": "all", "--allusers": "all", "-D": "duplicates", "--duplicates": "duplicates",
                        "-b": "brief", "--brief": "brief"})
    cfg = _config(state)
    rows = json.loads((state / "accounting.json").read_text())
    for job in _read_jobs(state / "queue" / f"{cfg['user']}.tsv"):  # sacct also lists jobs not ended yet
        rows.append({"id": job["id"], "state": job["state"], "exit": "0:0", "submit": job["submit"],
                     "start": job["submit"] if job["state"] != "PENDING" else "Unknown", "end": "Unknown",
                     "user": job["user"], "name": job["name"]})
    if opts.get("jobs"):
        wanted = set(opts["jobs"].split(","))
        rows = [r for r in rows if _id_matches(r["id"], wanted)]
    elif not opts.get("all"):
        users = set((opts.get("user") or cfg["user"]).split(","))
        rows = [r for r in rows if r["user"] in users]
    if opts.get("start") and re.match(r"\d{4}-\d\d-\d\d", opts["start"]):
        start = opts["start"] if "T" in opts["start"] else opts["start"] + "T00:00:00"
        rows = [r for r in rows if r["end"] == "Unknown" or r["end"] >= start]
    if opts.get("states"):
        keep = {s.upper() for s in opts["states"].split(",")}
        rows = [r for r in rows if r["state"].split()[0] in keep or _SHORT.get(r["state"].split()[0]) in keep]
    if not opts.get("alloc"):
        rows = [step for r in rows for step in ([r] if r["end"] == "Unknown" else
                [r, {**r, "id": r["id"] + ".batch", "name": "batch"},
                 {**r, "id": r["id"] + ".extern", "name": "extern", "state": "COMPLETED", "exit": "0:0"}])]
    fields = (opts.get("format") or "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode").split(",")
    keys = [_SACCT_FIELDS.get(f.split("%")[0].strip().lower()) for f in fields]
    table = [[str(r.get(k, "")) if k else "" for k in keys] for r in rows]
    head = [f.split("%")[0] for f in fields]
    if opts.get("parsable2") or opts.get("parsable"):
        end = "|" if opts.get("parsable") and not opts.get("parsable2") else ""
        lines = ([] if opts.get("noheader") else ["|".join(head) + end]) + ["|".join(r) + end for r in table]
    else:
        lines = ([] if opts.get("noheader") else [" ".join(h[:10].rjust(10) for h in head),
                                                   " ".join("-" * 10 for _ in head)])
        lines += [" ".join(v[:10].rjust(10) for v in r) for r in table]
    return lines


def _array_indices(spec: str, max_array_size: int) -> list[int]:
    body = spec.split("%", 1)[0]
    out = []
    try:
        for part in body.split(","):
            step = 1
            if ":" in part:
                part, step_text = part.split(":", 1)
                step = int(step_text)
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi or lo) + 1, step))
    except ValueError:
        raise _Exit(1, "sbatch: error: Invalid job array specification") from None
    if not out or max(out) >= max_array_size or step <= 0:
        raise _Exit(1, "sbatch: error: Batch job submission failed: Invalid job array specification")
    return out


def _sbatch(state: Path, args: list[str]) -> list[str]:
    takes = {"-a": "array", "--array": "array", "-J": "name", "--job-name": "name", "-d": "dependency",
             "--dependency": "dependency", "-p": "partition", "--partition": "partition", "-o": "output",
             "--output": "output", "-e": "error", "--error": "error", "-t": "time", "--time": "time",
             "-A": "account", "--account": "account", "-q": "qos", "--qos": "qos", "-N": "nodes",
             "--nodes": "nodes", "-c": "cpus", "--cpus-per-task": "cpus", "--mem": "mem", "--gpus-per-node": "gpus",
             "--signal": "signal", "--ntasks-per-node": "ntasks", "--wrap": "wrap"}
    flags = {"--parsable": "parsable", "--requeue": "requeue", "--exclusive": "exclusive",
             "-H": "hold", "--hold": "hold"}
    opts, rest = _options(args, takes, flags)
    script_text = ""
    if rest:
        script_text = Path(rest[0]).read_text()
    elif opts.get("wrap"):
        script_text = f"#!/bin/sh\n{opts['wrap']}\n"
    else:
        raise _Exit(1, "sbatch: error: Unable to open file")
    in_script = [line.strip()[len("#SBATCH"):].split() for line in script_text.splitlines()
                 if line.strip().startswith("#SBATCH")]
    from_script, _ = _options([w for words in in_script for w in words], takes, flags)
    opts = {**from_script, **opts}  # the command line wins over #SBATCH lines, as in Slurm
    with _Locked(state):
        cfg = _config(state)
        indices = _array_indices(opts["array"], cfg["max_array_size"]) if opts.get("array") else None
        ours_path = state / "queue" / f"{cfg['user']}.tsv"
        queued = _read_jobs(ours_path)
        n_new = len(indices) if indices is not None else 1
        if cfg.get("max_submit") is not None and len(queued) + n_new > cfg["max_submit"]:
            raise _Exit(1, "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission "
                           "failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time "
                           "limits)")
        job = cfg["next_job_id"]
        cfg["next_job_id"] = job + 1
        _write_json(state / "config.json", cfg)
        (state / "scripts" / f"{job}.sh").write_text(script_text)
        reason = "Dependency" if opts.get("dependency") else "JobHeldUser" if opts.get("hold") else "Priority"
        ids = [str(job)] if indices is None else [f"{job}_{i}" for i in indices]
        now = _iso(time.time())
        name = str(opts.get("name") or (Path(rest[0]).name if rest else "wrap"))
        new = [(i, "PENDING", reason, now, cfg["user"], name) for i in ids]
        _write_jobs(ours_path, [tuple(j[f] for f in _FIELDS) for j in queued] + new)
    return [str(job) if opts.get("parsable") else f"Submitted batch job {job}"]


def _scancel(state: Path, args: list[str]) -> list[str]:
    _, ids = _options(args, {"-u": "user", "--user": "user", "-s": "signal", "--signal": "signal"}, {})
    wanted = set(ids)
    with _Locked(state):
        cfg = _config(state)
        ours_path = state / "queue" / f"{cfg['user']}.tsv"
        queued = _read_jobs(ours_path)
        gone = [j for j in queued if _id_matches(j["id"], wanted)]
        _write_jobs(ours_path, [tuple(j[f] for f in _FIELDS) for j in queued if j not in gone])
        acct = json.loads((state / "accounting.json").read_text())
        now = _iso(time.time())
        acct += [{"id": j["id"], "state": f"CANCELLED by {os.getuid()}", "exit": "0:15", "submit": j["submit"],
                  "start": j["submit"], "end": now, "user": j["user"], "name": j["name"]} for j in gone]
        _write_json(state / "accounting.json", acct)
    return []


def _scontrol(state: Path, args: list[str]) -> list[str]:
    cfg = _config(state)
    words = [a for a in args if not a.startswith("-")]
    if words[:2] == ["show", "config"]:
        return ["Configuration data as of 2026-12-03T12:00:00", "AccountingStorageType   = accounting_storage/slurmdbd",
                "ClusterName             = fake", f"MaxArraySize            = {cfg['max_array_size']}",
                f"MaxJobCount             = {cfg['max_job_count']}", "MaxStepCount            = 40000",
                "MessageTimeout          = 10 sec", "SchedulerType           = sched/backfill",
                "SLURM_VERSION           = 23.02.7"]
    if words[:2] == ["show", "job"] and len(words) > 2:
        wanted = {words[2]}
        jobs = [j for j in _read_jobs(state / "queue" / f"{cfg['user']}.tsv") if _id_matches(j["id"], wanted)]
        if not jobs:
            raise _Exit(1, "slurm_load_jobs error: Invalid job id specified")
        return [f"JobId={j['id'].split('_')[0]} ArrayTaskId={j['id'].partition('_')[2] or 'N/A'} "
                f"JobName={j['name']} UserId={j['user']} JobState={j['state']} Reason={j['reason']} "
                f"SubmitTime={j['submit']}" for j in jobs]
    return []


_QOS = {"name": "normal", "maxsubmitpu": "max_submit", "maxjobspu": "", "maxsubmitpa": "", "maxwall": "",
        "priority": "0"}
_ASSOC = {"cluster": "fake", "account": "default", "user": "user", "partition": "", "qos": "normal",
          "maxsubmit": "max_submit", "maxjobs": "", "grpsubmit": ""}


def _sacctmgr(state: Path, args: list[str]) -> list[str]:
    cfg = _config(state)
    words = [a for a in args if not a.startswith("-")]
    entity = words[1].lower() if len(words) > 1 and words[0] in ("show", "list") else ""
    table = _QOS if entity == "qos" else _ASSOC if entity in ("assoc", "association", "associations") else None
    if table is None:
        return []
    fmt = next((w.split("=", 1)[1] for w in words if w.lower().startswith("format=")), ",".join(table))
    values = []
    for field in fmt.split(","):
        key = table.get(field.split("%")[0].lower(), "")
        value = {"max_submit": "" if cfg["max_submit"] is None else str(cfg["max_submit"]),
                 "user": cfg["user"]}.get(key, key)
        values.append(value)
    parsable = "-P" in args or "--parsable2" in args or "-p" in args or "--parsable" in args
    head = [f.split("%")[0] for f in fmt.split(",")]
    noheader = "-n" in args or "--noheader" in args
    if parsable:
        return ([] if noheader else ["|".join(head)]) + ["|".join(values)]
    return ([] if noheader else [" ".join(h.rjust(10) for h in head)]) + [" ".join(v.rjust(10) for v in values)]


def _sinfo(state: Path, args: list[str]) -> list[str]:
    opts, _ = _options(args, {"-o": "format", "--format": "format", "-p": "partition"},
                       {"-h": "noheader", "--noheader": "noheader", "-s": "summarize", "-N": "nodes"})
    fmt = opts.get("format") or "%P %a %D %N"
    values = {"G": "(null)", "R": "debug", "P": "debug*", "a": "up", "D": "4", "N": "node-[01-04]", "c": "8"}
    out = [] if opts.get("noheader") else [_formatter(fmt, lambda code, _: code.upper())(None)]
    return out + [_formatter(fmt, lambda code, _: values.get(code, ""))(None)]


_HANDLERS = {"squeue": _squeue, "sacct": _sacct, "sbatch": _sbatch, "scancel": _scancel, "scontrol": _scontrol,
             "sacctmgr": _sacctmgr, "sinfo": _sinfo}
