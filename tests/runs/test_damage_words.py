"""What the launcher and `plan` say of a damaged run: the same word and the same fix as the reading verbs (issue 40,
items 2 and 4).

- an identity.json planted as a symbolic link in a run directory not run yet is refused before anything is
  written (one line, exit 2), never trained for hours to end DAMAGED behind an exit code 0;
- `decide`: a damaged STATUS is resumed, any other damage is skipped until --force, and the reason says DAMAGED;
- the fix of a damaged run names its variant with the `--set` words `status` shows (run_index.variant_command).
Fake stages (tests/runs/conftest.py), no training.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.registry.registry import Registry
from exoformer.run_identity import RunIdentity
from exoformer.rundir import RunDir
from exoformer.runs import rundirs as runs
from exoformer.runs import run_index, status
from exoformer.runs.plan import decide

TINY = ["--preset", "smoke", "--set", "train.steps=2"]


def _planted(root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The run directory of base-s42 (TINY) holding only an identity.json that links to a file elsewhere."""
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])
    run_dir = runs.run_dir_for(spec, root)
    run_dir.mkdir(parents=True)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"spec": spec.name, "seed": spec.seed, "preset": spec.preset,
                                  "hash12": spec.hash12}))  # this run's identity: it is where it is that is wrong
    (run_dir / "identity.json").symlink_to(target)
    return run_dir, target


def test_a_symlinked_identity_is_refused_by_check_identity(tmp_path):
    run_dir, _ = _planted(tmp_path / "runs", tmp_path)
    spec = Registry().resolve("base-s42", preset="smoke", overrides=["train.steps=2"])
    with pytest.raises(UserError, match="identity.json is a symbolic link"):
        runs.check_identity(spec, run_dir)


@pytest.mark.parametrize("flags", [[], ["--force"]])
def test_run_refuses_a_symlinked_identity_before_anything_is_written(tmp_path, capsys, fake_stages, flags):
    root = tmp_path / "runs"
    run_dir, target = _planted(root, tmp_path)
    before = target.read_text()
    code = main(["run", "base-s42", *TINY, "--runs-dir", str(root), "--backend", "inline", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "identity.json is a symbolic link" in err, err
    assert sorted(p.name for p in run_dir.iterdir()) == ["identity.json"]  # no STATUS, no spec, no log
    assert target.read_text() == before


def test_decide_resumes_a_damaged_status_and_skips_other_damage_until_force():
    base = dict(state="DAMAGED", active=False, has_checkpoint=True, missing_stages=[], exists=True, force=False,
                retry_failed=False)
    fifo = "STATUS is not a regular file (fix: `reproduce.py run x --preset smoke` resumes it, or add --force)"
    assert decide(**base, damage=fifo) == ("resume", "DAMAGED: STATUS is not a regular file")
    lost = "STATUS is missing but stage train was recorded; its numbers are not shown (fix: `... --force`)"
    assert decide(**base, damage=lost) == ("skip", "DAMAGED: STATUS is missing but stage train was recorded "
                                                   "(use --force)")
    assert decide(**{**base, "retry_failed": True}, damage=lost)[0] == "skip"
    assert decide(**{**base, "force": True}, damage=lost)[0] == "rerun"
    assert decide(**{**base, "active": True}, damage=lost)[0] == "skip"


def test_the_fix_names_the_variant_in_the_words_status_shows(tmp_path):
    overrides = {"train.steps": 30, "eval.limit": None, "model.gated": True, "analysis.paths": ["q", "k"]}
    identity = RunIdentity(spec="base-s42", seed=42, preset="smoke", hash12="0123456789ab", overrides=overrides)
    run = RunDir(tmp_path / "runs" / "base-s42" / "0123456789ab")
    sets = [word for text in status.set_words(overrides) for word in ("--set", text)]
    command = run_index.variant_command(identity, run, "--force")
    assert shlex.split(command) == ["reproduce.py", "run", "base-s42", "--preset", "smoke", *sets, "--runs-dir",
                                    str(tmp_path / "runs"), "--force"]
    assert "train.steps=30 --set eval.limit=null --set model.gated=true" in command
