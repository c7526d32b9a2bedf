"""What a job running under Slurm asks Slurm about itself (the launcher side is exoformer/runs/backends/slurm.py)."""

from __future__ import annotations

import os
import subprocess


def slurm_is_ending(job_id: str | None = None) -> bool:
    """Whether Slurm itself is already ending this job (`scontrol requeue`, preemption, scancel: it sent SIGTERM
    and will requeue or cancel it): its state is no longer RUNNING. Asking submitit to requeue it then fails
    (`scontrol requeue` refuses a job that is already pending). False outside Slurm or when scontrol cannot say."""
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return False
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                               timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    state = next((word.split("=", 1)[1] for word in shown.stdout.split() if word.startswith("JobState=")), None)
    return shown.returncode == 0 and state is not None and state != "RUNNING"
