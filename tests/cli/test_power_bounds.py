"""`power --effect` on extreme numbers (issue 40): each option is bounded (docs/input-limits.md, "Command-line
options"), a value outside its range is one line naming the flag, and a plan never prints inf or an overflow
traceback."""

from __future__ import annotations

import json

import pytest

from exoformer.cli import main


def _power(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["power", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("args, where", [
    (["--effect", "a=1e-308", "--seed-sd", "1e308"], "--seed-sd"),
    (["--effect", "a=1", "--seed-sd", "1", "--item-sd", "1e300"], "--item-sd"),
    (["--effect", "a=1", "--seed-sd", "1e200", "--item-sd", "1e200"], "--seed-sd"),
    (["--effect", "a=1", "--seed-sd", "0.5", "--hours-per-run", "1e308"], "--hours-per-run"),
    (["--effect", "a=1e308", "--seed-sd", "1"], "--effect"),
    (["--effect", "a=1", "--seed-sd", "1", "--items", "1000000000000000000000"], "--items"),
    (["--effect", "a=1", "--seed-sd", "1", "--hours-per-run", "-1"], "--hours-per-run"),
])
def test_an_extreme_option_is_one_line_naming_it(capsys, args, where):
    """1e308 sds were an OverflowError traceback, --hours-per-run 1e308 printed "inf GPU-hours"."""
    code, out, err = _power(capsys, *args)
    assert code == 2 and out == "", (code, out)
    assert err.startswith(f"error: {where}: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_at_the_bounds_a_plan_is_finite(capsys, json_flag):
    """The largest values accepted give finite GPU-hours (10,000 seeds x 2 rows x 1,000,000 hours at most)."""
    code, out, err = _power(capsys, "--effect", "a=1", "--effect", "b=1e-308", "--seed-sd", "0.5",
                            "--item-sd", "1000000", "--items", "1000000000", "--hours-per-run", "1000000", *json_flag)
    assert code == 0, err
    if json_flag:
        claims = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))["claims"]
        assert claims[0]["seeds_per_row"] >= 2 and 0 < claims[0]["gpu_hours"] < 1e11
        assert claims[1]["seeds_per_row"] is None and claims[1]["gpu_hours"] is None
    else:
        assert "inf" not in out.lower() and "nan" not in out.lower()
        assert "the +1 a claim needs" in out and "GPU-hours" in out
