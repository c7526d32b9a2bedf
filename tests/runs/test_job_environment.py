"""The environment local job processes start with: glibc malloc settings that keep a training step's large
tensors mapped between steps (exoformer/environ.py GLIBC_MALLOC_ENV), handed to every job, and what glibc does
with them in a child process, by its own account."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from types import SimpleNamespace

import pytest

from exoformer.environ import GLIBC_MALLOC_ENV, glibc_malloc_env
from exoformer.runs.backends import local as local_backend
from exoformer.runs.backends.local import LocalBackend

HEAP_REPORT = r"""
import ctypes, json, torch
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
alive = [torch.empty(1024, 1024).fill_(1.0) for _ in range(16)]  # 16 x 4 MiB, as a smoke step's activations
held = libc.mallinfo2()
del alive
freed = libc.mallinfo2()
print(json.dumps({"mapped_while_alive": held.hblkhd, "heap_while_alive": held.arena, "heap_after_free": freed.arena}))
"""


def heap_report(extra_env: dict[str, str]) -> dict[str, int]:
    """glibc's own account (mallinfo2) of a fresh process that makes sixteen 4 MiB tensors and frees them."""
    env = {k: v for k, v in os.environ.items() if k not in GLIBC_MALLOC_ENV}
    out = subprocess.run([sys.executable, "-c", HEAP_REPORT], env={**env, **extra_env}, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings are glibc's")
def test_with_the_settings_step_sized_tensors_live_on_a_heap_that_keeps_its_pages():
    """By default each 4 MiB tensor is a fresh mapping (unmapped when freed: its pages fault in again next time);
    with the settings they come from the heap, and freeing them leaves the heap's pages to the process."""
    default, tuned = heap_report({}), heap_report(GLIBC_MALLOC_ENV)
    all_tensors = 16 * 4 * 2**20
    assert default["mapped_while_alive"] >= all_tensors
    assert tuned["mapped_while_alive"] < all_tensors / 16
    assert tuned["heap_while_alive"] >= all_tensors
    assert tuned["heap_after_free"] == tuned["heap_while_alive"]  # nothing given back to the OS


def test_a_users_own_malloc_setting_wins(monkeypatch):
    for key in GLIBC_MALLOC_ENV:
        monkeypatch.delenv(key, raising=False)
    assert glibc_malloc_env() == GLIBC_MALLOC_ENV
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert glibc_malloc_env() == {}  # the pair only works together: none of ours beside the user's


def test_every_local_job_starts_with_the_settings_and_the_launcher_keeps_its_own(monkeypatch, tmp_path):
    for key in GLIBC_MALLOC_ENV:
        monkeypatch.delenv(key, raising=False)
    seen = []

    class FakeJob:
        job_id, paths = "1000", type("Paths", (), {"folder": tmp_path})()

        def done(self):
            return True

    class FakeItem:
        claim = type("Claim", (), {"job_id": None, "folder": None})()

        def __init__(self, n: int):
            self.spec = SimpleNamespace(name=f"spec-{n}", train=SimpleNamespace(is_branch=False))  # no decay branch

    def fake_submit(executor, job_items):
        seen.append({key: os.environ.get(key) for key in (*GLIBC_MALLOC_ENV, "OMP_NUM_THREADS")})
        return FakeJob()

    backend = LocalBackend(poll_s=0.0)
    monkeypatch.setattr(backend, "_executor", lambda root: None)
    monkeypatch.setattr(local_backend, "_submit_deaf_to_ctrl_c", fake_submit)
    backend.launch([FakeItem(0), FakeItem(1)], tmp_path)
    assert seen == [{**GLIBC_MALLOC_ENV, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}] * 2
    assert not any(key in os.environ for key in GLIBC_MALLOC_ENV)
