"""How job and launcher processes end: the exit handler of exoformer/process_exit.py (cyclic garbage still finalised,
the rest frozen before the shutdown's collections, registered once), and the launcher submitting a job without
loading torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_child(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)


def test_cyclic_garbage_is_finalised_and_the_survivors_are_frozen_at_exit(tmp_path):
    marker = tmp_path / "finalised"
    code = f"""
import atexit, gc, sys
# registered first, so it runs after the handler under test (exit handlers run last-registered first)
atexit.register(lambda: sys.stdout.write(f"frozen={{gc.get_freeze_count()}}\\n"))
from exoformer.process_exit import collect_then_freeze_at_exit
collect_then_freeze_at_exit()
collect_then_freeze_at_exit()
class Cycle:
    def __init__(self):
        self.me = self
    def __del__(self):
        open({str(marker)!r}, "w").write("yes")
Cycle()
gc.disable()  # only the exit handler's collection can reach the cycle
sys.stdout.write(f"handlers={{atexit._ncallbacks()}}\\n")
"""
    result = run_child(code)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("=") for line in result.stdout.split())
    assert lines["handlers"] == "2"  # the probe and one handler, though registered twice
    assert int(lines["frozen"]) > 1000  # the interpreter's live objects, moved out of the shutdown's collections
    assert marker.read_text() == "yes"  # the garbage cycle was collected, its finaliser ran


def test_without_the_handler_nothing_is_frozen():
    code = """
import atexit, gc, sys
atexit.register(lambda: sys.stdout.write(f"frozen={gc.get_freeze_count()}\\n"))
import exoformer.process_exit
"""
    result = run_child(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "frozen=0"


def test_job_processes_and_the_cli_register_the_handler():
    code = """
from exoformer.runs.pipeline import PipelineJob
from exoformer.cli import main
from exoformer import process_exit
assert not process_exit._registered
try:
    PipelineJob()("no-such-run", None, "local")
except Exception:
    pass
assert process_exit._registered, "PipelineJob did not register the exit handler"
process_exit._registered = False
main([])  # no verb: prints the help
assert process_exit._registered, "the CLI did not register the exit handler"
print("ok")
"""
    result = run_child(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def test_the_launcher_pickles_a_job_without_loading_torch():
    code = """
import pickle, sys
from exoformer.runs.pipeline import PipelineJob
pickle.dumps(PipelineJob())
assert 'torch' not in sys.modules, 'torch imported'
print('clean')
"""
    result = run_child(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"
