"""Issue 41's small first-use items: the missing default runs root is named once in its error line, and `list`
shows the model shape a spec resolves to beside its preset (the size ladder trains ~125M and ~250M shapes under
the 450m recipe, which read as 450M models)."""

from __future__ import annotations

import json

from exoformer.cli import main
from exoformer.errors import UserError
from exoformer.runs import rundirs
from exoformer.runs.rundirs import RUNS_ENV


def test_a_missing_default_runs_root_is_named_once(tmp_path, capsys, monkeypatch):
    """Was `error: runs root: runs root /x does not exist (fix: ...)`."""
    missing = tmp_path / "results" / "runs"
    monkeypatch.delenv(RUNS_ENV, raising=False)
    monkeypatch.setattr(rundirs, "DEFAULT_RUNS_ROOT", missing)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: runs root {missing} does not exist (fix: ") and err.count("\n") == 1, err
    assert err.split(" (fix: ")[0].count("runs root") == 1, err


def test_a_where_is_still_named_when_the_message_does_not_open_with_it():
    assert str(UserError("runs root /x does not exist", where="runs root")) == "runs root /x does not exist"
    assert str(UserError("runs root /x does not exist", where="--runs-dir")) == \
        "--runs-dir: runs root /x does not exist"
    assert str(UserError("must be >= 1", where="model.n_head", fix="use 2")) == \
        "model.n_head: must be >= 1 (fix: use 2)"
    assert str(UserError("model.n_head2 is unknown", where="model.n_head")) == \
        "model.n_head: model.n_head2 is unknown"


def test_list_shows_the_shape_a_ladder_spec_resolves_to_beside_its_preset(tmp_path, capsys):
    """`ladder-125m-*` resolve under preset 450m (its recipe: 10B tokens, the paper's numerics) with their own
    ~125M shape; the list names both, and the shape that `--preset smoke` gives them instead."""
    root = ["--runs-dir", str(tmp_path)]
    assert main(["list", "ladder-125m-base-s42", *root]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split() == ["SPEC", "GROUP", "VARIANT", "PRESET", "SHAPE", "HASH", "STATUS"]
    assert row.split()[:5] == ["ladder-125m-base-s42", "size-ladder", "base", "450m", "ladder-125m-ungated"]
    assert main(["list", "ladder-125m-gated-s42", "--json", *root]) == 0
    spec = json.loads(capsys.readouterr().out)["specs"][0]
    assert (spec["preset"], spec["shape"]) == ("450m", "ladder-125m-gated")
    assert main(["list", "ladder-125m-base-s42", "--preset", "smoke", *root]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[3:5] == ["smoke", "smoke"]
