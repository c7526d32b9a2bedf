"""`predict --points` on hostile or careless input (issue 40): every file and `--at` is bounded, refused in one line
naming the file:line or the flag, and what is printed is never inf, NaN or a raw control character
(docs/input-limits.md, "Ladder CSV"). Through the command line only, so the same tests judge any commit."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from exoformer.cli import main

TRUE = dict(E=1.69, A=406.4, alpha=0.34, B=410.7, beta=0.28)
"""The Chinchilla fit (Hoffmann et al. 2022) as a known truth, as in test_scaling_law.py."""
SIZES = [20e6, 40e6, 80e6, 160e6]
BUDGETS = [0.4e9, 0.8e9, 1.6e9, 3.2e9]
MAX_ROWS = 2_000
"""The row limit docs/input-limits.md states (points.MAX_ROWS), written out so the test also judges a commit
without it."""
NUMBERS = re.compile(r"\b(?:inf|nan|infinity)\b", re.IGNORECASE)


def _loss(params: float, tokens: float) -> float:
    return TRUE["E"] + TRUE["A"] / params ** TRUE["alpha"] + TRUE["B"] / tokens ** TRUE["beta"]


def _ladder(rows: int = 16, seed: int = 5) -> list[tuple[float, float, float]]:
    """`rows` distinct points of the known law with noise sd 0.005: the 4 x 4 grid, then sizes nudged apart."""
    rng = np.random.default_rng(seed)
    grid = [(p * (1 + k * 1e-4), t) for k in range(rows // 16 + 1) for p in SIZES for t in BUDGETS][:rows]
    return [(p, t, _loss(p, t) + float(rng.normal(0, 0.005))) for p, t in grid]


def _csv(path: Path, rows, *, header: str = "params,tokens,loss", extra: str = "") -> str:
    path.write_text(header + "\n" + "".join(f"{p:.8g},{t:.8g},{x:.6f}{extra}\n" for p, t, x in rows))
    return str(path)


class _Done:
    def __init__(self, code: int, captured) -> None:
        self.code, self.out, self.err = code, captured.out, captured.err

    def one_line(self) -> str:
        """The refusal: exit 2 and one stderr line."""
        assert self.code == 2, (self.code, self.out[-300:], self.err[-300:])
        assert self.err.startswith("error: ") and self.err.count("\n") == 1, self.err
        return self.err


@pytest.fixture
def predict(capsys):
    def run(*args: str) -> _Done:
        code = main(["predict", *args])
        return _Done(code, capsys.readouterr())
    return run


@pytest.fixture
def good(tmp_path) -> str:
    return _csv(tmp_path / "ladder.csv", _ladder())


def test_a_points_file_over_the_row_limit_is_refused(tmp_path, predict):
    """A 1 MiB file of 48k rows ran past 300 s at 5.3 GB: the row after the limit is refused, naming its line."""
    path = _csv(tmp_path / "big.csv", _ladder(MAX_ROWS + 1))
    err = predict("--points", path, "--at", "450M:10B", "--bootstrap", "50").one_line()
    assert f"{path}:{MAX_ROWS + 2}:" in err and f"more than {MAX_ROWS:,} rows" in err


def test_rows_times_replicates_over_the_bound_is_refused_before_fitting(tmp_path, predict):
    """1,000 rows x 100,000 replicates was a MemoryError; 41 x 100,000 is over 4,000,000 cells and refused at once."""
    path = _csv(tmp_path / "ladder.csv", _ladder(41))
    err = predict("--points", path, "--at", "450M:10B", "--bootstrap", "100000").one_line()
    assert err.startswith("error: --bootstrap: 42 points (41 rows + 1 law(s) x 1 --at) x 100,000 bootstrap "
                          "replicates is over 4,000,000")
    assert "--bootstrap 95,238 or fewer" in err


def test_forecast_points_times_replicates_count_too(good, predict):
    """1,000 --at points x 100,000 replicates took 2.5 GB: the forecasts of every law count with the rows."""
    at = [arg for i in range(40) for arg in ("--at", f"{100 + i}M:10B")]
    err = predict("--points", good, *at, "--bootstrap", "100000").one_line()
    assert "56 points (16 rows + 1 law(s) x 40 --at) x 100,000 bootstrap replicates is over 4,000,000" in err
    done = predict("--points", good, *at, "--json")
    assert done.code == 0 and len(json.loads(done.out)) == 40


def test_a_repeated_point_is_refused_naming_both_lines(tmp_path, predict):
    """50 copies of one row narrowed the interval silently: a second row at a point is refused (seeds: average)."""
    rows = _ladder()
    path = _csv(tmp_path / "dup.csv", rows + [rows[0]] * 50)
    err = predict("--points", path, "--at", "450M:10B").one_line()
    assert f"{path}:18: params 2e+07, tokens 4e+08 repeat line 2" in err and "average" in err


def test_the_same_point_in_two_groups_is_two_points(tmp_path, predict):
    rows = _ladder()
    path = tmp_path / "groups.csv"
    path.write_text("params,tokens,loss,group\n" + "".join(f"{p:.8g},{t:.8g},{x + shift:.6f},{name}\n"
                                                           for name, shift in (("a", 0.0), ("b", -0.05))
                                                           for p, t, x in rows))
    done = predict("--points", str(path), "--at", "450M:10B", "--json", "--bootstrap", "100")
    assert done.code == 0, done.err
    assert [r["group"] for r in json.loads(done.out)] == ["a", "b"]


@pytest.mark.parametrize("noise", [0.0, 1e-4])
def test_a_flat_ladder_is_refused(tmp_path, predict, noise):
    """A ladder whose loss does not fall with size was fitted with a zero-width interval."""
    rng = np.random.default_rng(1)
    path = _csv(tmp_path / "flat.csv", [(p, t, 3.0 + float(rng.normal(0, noise))) for p, t, _ in _ladder()])
    err = predict("--points", path, "--at", "450M:10B").one_line()
    assert "the loss does not fall with" in err and "scatter" in err


@pytest.mark.parametrize("params, tokens, words", [
    ("1e-300", "1e9", "params '1e-300' is outside 1e3 to 1e15"),
    ("2e15", "1e9", "params '2e15' is outside 1e3 to 1e15"),
    ("20M", "100", "tokens '100' is outside 1e3 to 1e16"),
    ("20M", "1e17", "tokens '1e17' is outside 1e3 to 1e16"),
])
def test_counts_outside_their_range_are_refused_in_the_csv(tmp_path, predict, params, tokens, words):
    path = tmp_path / "ladder.csv"
    _csv(path, _ladder())
    path.write_text(path.read_text() + f"{params},{tokens},3.0\n")
    err = predict("--points", str(path), "--at", "450M:10B").one_line()
    assert f"{path}:18: {words}" in err


@pytest.mark.parametrize("at, words", [
    ("1e-320:1e9", "params '1e-320' is outside 1e3 to 1e15"),
    ("1e-300:1e-300", "params '1e-300' is outside 1e3 to 1e15"),
    ("1e308:1e308", "params '1e308' is outside 1e3 to 1e15"),
    ("450M:1e17", "tokens '1e17' is outside 1e3 to 1e16"),
])
def test_at_outside_the_ranges_is_refused(good, predict, at, words):
    """--at 1e-320:1e9 printed loss inf [nan, nan]; 1e-300:1e-300 a negative bound; 1e308:1e308 "1e+296T"."""
    for json_flag in ((), ("--json",)):
        done = predict("--points", good, "--at", at, *json_flag)
        assert done.one_line().startswith(f"error: --at: {words}") and done.out == ""


def test_a_cpu_smoke_ladder_is_inside_the_ranges(tmp_path, predict):
    """The smoke ladder's counts (2e5 parameters, 9e4 tokens) are accepted: the token floor is 1e3, not 1e6."""
    params, tokens = (a.ravel() for a in np.meshgrid([2e5, 3.3e5, 6e5], [92e3, 184e3]))
    loss = np.array([1.72, 1.63, 1.55, 0.86, 0.83, 0.80]) * np.array([1.0, 1.0, 1.0, 1.0, 1.01, 0.99])
    path = _csv(tmp_path / "smoke.csv", zip(params, tokens, loss))
    done = predict("--points", path, "--at", "1e6:1e6", "--json", "--bootstrap", "100")
    assert done.code == 0, done.err


def test_a_degenerate_law_prints_no_number_but_its_reason_and_fix(tmp_path, predict):
    """3 sizes x 2 budgets whose loss halves between budgets (the old CPU ladder): one residual dof, the floor
    pinned at 0. It printed `1.00 [1.00, 9377.78]`; now one line with the reason and the ladder that fixes it."""
    params, tokens = (a.ravel() for a in np.meshgrid([2e5, 3.3e5, 6e5], [92e3, 184e3]))
    loss = np.array([1.72, 1.63, 1.55, 0.86, 0.83, 0.80]) * np.array([1.0, 1.0, 1.0, 1.0, 1.01, 0.99])
    path = _csv(tmp_path / "smoke.csv", zip(params, tokens, loss))
    done = predict("--points", path, "--at", "1e6:1e6", "--bootstrap", "100")
    assert done.code == 0, done.err
    lines = [line for line in done.out.splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("no forecast: ") and "1 residual dof" in lines[0], done.out
    assert "needs >= 3 sizes x 3 budgets" in lines[0] and not re.search(r"\d\.\d{4}", done.out)
    done = predict("--points", path, "--at", "1e6:1e6", "--json", "--bootstrap", "100")
    row = json.loads(done.out)[0]
    assert done.code == 0 and row["loss"] is row["lo"] is row["run_hi"] is None
    assert row["why"].startswith("no forecast: ")


@pytest.mark.parametrize("at", ["1e3:1e3", "1e15:1e16", "1e3:1e16", "1e12:1e13"])
def test_far_points_print_finite_numbers_and_a_warning(good, predict, at):
    """At the ends of the ranges the forecast is finite, its lower bounds non-negative, and a warning says the point
    lies far outside the ladder; with --json the warning goes to stderr and stdout stays strict JSON."""
    done = predict("--points", good, "--at", at)
    assert done.code == 0, done.err
    assert not NUMBERS.search(done.out), done.out
    row = done.out.splitlines()[2]
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d{4}", row)]
    assert len(numbers) == 5 and min(numbers) >= 0 and all(math.isfinite(x) for x in numbers), row
    warning = [line for line in done.out.splitlines() if line.startswith("warning: ")]
    assert len(warning) == 1 and "far outside" in warning[0]

    done = predict("--points", good, "--at", at, "--json")
    assert done.code == 0, done.err
    rows = json.loads(done.out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert 0 <= rows[0]["lo"] <= rows[0]["loss"] <= rows[0]["hi"] < 1e6
    assert done.err.startswith("warning: ") and "far outside" in done.err


def test_a_point_inside_the_ladder_has_no_warning(good, predict):
    done = predict("--points", good, "--at", "80M:1.6B")
    assert done.code == 0 and "warning" not in done.out + done.err


def test_a_point_outside_the_ladders_compute_or_tokens_per_parameter_says_how_far(good, predict):
    """450M / 10B tokens is 8.8x the ladder's largest compute (not far: under 100x); 20M / 20B is 1,000 tokens per
    parameter, 6.25x the ladder's largest."""
    done = predict("--points", good, "--at", "450M:10B", "--at", "20M:20B")
    warnings = [line for line in done.out.splitlines() if line.startswith("warning: ")]
    assert done.code == 0 and len(warnings) == 2, done.out
    assert "the compute 6ND 2.7e+19 is 8.79x the ladder's largest" in warnings[0]
    assert "extrapolates the law outside its runs" in warnings[0] and "far" not in warnings[0]
    assert "the tokens per parameter 1e+03 is 6.25x the ladder's largest" in warnings[1]


@pytest.mark.parametrize("line, words", [
    ("20M,1B,3.0,zz", "4 fields where the header has 3"),
    ("20M,1B", "2 fields where the header has 3"),
])
def test_a_row_of_the_wrong_width_is_one_line_naming_file_and_line(tmp_path, predict, line, words):
    """A row with more fields than the header was an AttributeError traceback."""
    path = tmp_path / "ladder.csv"
    _csv(path, _ladder()[:3])
    path.write_text(path.read_text() + "\n" + line + "\n")  # the blank line counts: the error names line 6
    err = predict("--points", str(path), "--at", "450M:10B").one_line()
    assert f"{path}:6: {words}" in err


@pytest.mark.parametrize("loss, words", [
    ("-3.0", "loss '-3.0' must be positive"),
    ("0", "loss '0' must be positive"),
    ("1e5", "loss '1e5' must be positive and at most 100"),
    ("abc", "loss 'abc' is not a finite number"),
    ("inf", "loss 'inf' is not a finite number"),
])
def test_a_bad_loss_says_what_is_wrong(tmp_path, predict, loss, words):
    """A negative loss was refused as "not a finite number"; the message now says a loss must be positive."""
    path = tmp_path / "ladder.csv"
    _csv(path, _ladder()[:3])
    path.write_text(path.read_text() + f"20M,1B,{loss}\n")
    err = predict("--points", str(path), "--at", "450M:10B").one_line()
    assert f"{path}:5: {words}" in err


def test_control_characters_of_a_group_name_are_escaped(tmp_path, predict):
    """A group name went to the terminal raw: an escape sequence recoloured it."""
    path = _csv(tmp_path / "ladder.csv", _ladder(), header="params,tokens,loss,group", extra=",\x1b[31mred\x07")
    done = predict("--points", path, "--at", "450M:10B", "--bootstrap", "100")
    assert done.code == 0, done.err
    assert "\x1b" not in done.out and "\x07" not in done.out
    assert "group \\x1b[31mred\\x07: L(N, D)" in done.out and "\n\\x1b[31mred\\x07 " in done.out


def test_a_flat_group_is_refused_with_its_name_escaped(tmp_path, predict):
    path = tmp_path / "ladder.csv"
    _csv(path, [(p, t, 3.0) for p, t, _ in _ladder()], header="params,tokens,loss,group", extra=",\x1b[2Jx")
    err = predict("--points", str(path), "--at", "450M:10B").one_line()
    assert "\x1b" not in err and f"{path} group \\x1b[2Jx: the loss does not fall" in err


def test_the_limits_are_documented():
    from exoformer.report.forecast import law, points

    assert (points.MAX_ROWS, points.PARAMS_RANGE, points.TOKENS_RANGE) == (MAX_ROWS, (1e3, 1e15), (1e3, 1e16))
    assert law.MAX_BOOTSTRAP_CELLS == 4_000_000
    doc = (Path(__file__).resolve().parents[3] / "docs" / "input-limits.md").read_text()
    section = doc[doc.index("## Ladder CSV (`predict --points`)"):]
    for words in (f"at most {MAX_ROWS:,} rows", "[1e3, 1e15]", "[1e3, 1e16]", "one row per point",
                  "falls with parameters and with tokens"):
        assert words in section, words
    assert "at most 4,000,000" in doc
