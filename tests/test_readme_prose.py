"""README.md stays a quick start a person reads: short, in short sentences, quoting only rounded, checked figures.

The metrics are those of tools/prose_stats.py, which counts prose only. The pages of docs/ written for users are
held to the same sentence limits. The README's two timings are their measurements rounded to whole minutes: the
main job's (the median in results/bench_main_job.json) and the test suite's (the latest in results/test_suite.json).
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MEASURED = REPO / "results" / "bench_main_job.json"
SUITE = REPO / "results" / "test_suite.json"

MAX_README_LINES = 150
MAX_MEAN_WORDS = 18
MAX_SENTENCE_WORDS = 40
# The pages of docs/ rewritten for users; the notes the code cites keep their own style.
USER_PAGES = ("docs/cluster.md", "docs/reading.md")

SETUP_COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && "
    ".venv/bin/python reproduce.py run table1 --preset smoke",
    ".venv/bin/python -m pytest",
)


def _load_prose_stats():
    spec = importlib.util.spec_from_file_location("prose_stats", REPO / "tools" / "prose_stats.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


prose_stats = _load_prose_stats()


def test_the_counter_counts_prose_only():
    text = """# A heading is skipped

The first sentence has six words. The `code span counts as one` word here!
- A list item is one sentence without a full stop
- See [the docs](docs/reading.md), e.g. this page, for more.

```bash
fenced code is skipped. Entirely.
```

| a table | is skipped too |
|---|---|

    indented code is skipped
"""
    stats = prose_stats.prose_stats(text)
    assert stats.lines == len(text.splitlines())
    assert stats.sentences == ["The first sentence has six words.", "The CODE word here!",
                               "A list item is one sentence without a full stop",
                               "See the docs, e.g. this page, for more."]
    assert stats.lengths == [6, 4, 10, 8]
    assert stats.mean == pytest.approx(7.0) and stats.longest == 10


def test_a_paragraph_is_one_sentence_until_its_full_stop():
    stats = prose_stats.prose_stats("One sentence\nspread over two lines. A number like 0.08 ends\nnothing.\n")
    assert stats.lengths == [6, 6]


@pytest.mark.parametrize("page", ("README.md", *USER_PAGES))
def test_sentences_are_short(page):
    stats = prose_stats.prose_stats((REPO / page).read_text(encoding="utf-8"))
    longest = max(stats.sentences, key=prose_stats.word_count)
    assert stats.mean <= MAX_MEAN_WORDS, stats.summary(page)
    assert stats.longest <= MAX_SENTENCE_WORDS, f"{stats.summary(page)}: {longest}"


def test_the_readme_is_a_quick_start():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    for command in SETUP_COMMANDS:
        assert f"\n{command}\n" in text  # byte-identical, one line each


def main_job_median_wall_s(measured: dict) -> float:
    """The median wall time of the recorded main jobs of the current code: the record itself and the runs noted
    as the same code."""
    job = measured["main_job"]
    walls = [job["wall_s"]] + [run["wall_s"] for run in job.get("other_runs", [])
                               if run.get("note", "").startswith("same code")]
    return statistics.median(walls)


def test_the_readme_main_job_time_is_its_measurement_rounded():
    text = " ".join(README.read_text(encoding="utf-8").split())
    quoted = re.search(r"After the install, it takes about (\d+) minutes on 2 cores\.", text)
    assert quoted, "the README quotes the main job's time as 'about N minutes on 2 cores'"
    measured = json.loads(MEASURED.read_text())
    assert measured["main_job"]["command"].startswith("/usr/bin/time reproduce.py run table1 --preset smoke")
    assert int(quoted.group(1)) == round(main_job_median_wall_s(measured) / 60)


def test_the_readme_test_suite_time_is_its_latest_measurement_rounded():
    text = " ".join(README.read_text(encoding="utf-8").split())
    quoted = re.search(r"runs the test suite, in about (\d+) minutes on 2 cores\.", text)
    assert quoted, "the README quotes the suite's time as 'in about N minutes on 2 cores'"
    latest = json.loads(SUITE.read_text())["runs"][-1]
    assert int(quoted.group(1)) == round(latest["pytest_s"] / 60)


def test_the_readme_quotes_no_unrounded_measurement():
    """Timings and costs in the README are whole, rounded figures; exact ones live in results/ and docs/."""
    stats_text = " ".join(prose_stats.paragraphs(README.read_text(encoding="utf-8")))
    unit = r"(s|seconds?|min|minutes?|hours?|CPU-minutes|CPU-seconds|GPU-hours|GB)\b"
    assert not re.findall(r"\d+\.\d+\s*" + unit, stats_text)
    assert "measured" not in stats_text.lower()
