"""docs/reading.md's "Use it from Python" section runs as written: its first snippet runs a smoke spec through
exoformer.runs.orchestrate.run_target and reads its Table 1 row as a DataFrame; every snippet's imports resolve."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pandas as pd
import pytest

from exoformer.runs import rundirs as runs

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reading.md"


def python_snippets() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_every_snippet_imports_what_exists():
    snippets = python_snippets()
    assert len(snippets) >= 2
    for code in snippets:
        imports = [node for node in ast.parse(code).body if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert imports
        exec(compile(ast.Module(body=imports, type_ignores=[]), "docs/reading.md", "exec"), {})


@pytest.mark.slow
def test_the_run_and_read_snippet(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(runs.RUNS_ENV, str(tmp_path))  # the snippet's default runs root
    namespace: dict = {}
    exec(compile(python_snippets()[0], "docs/reading.md", "exec"), namespace)
    result, table = namespace["result"], namespace["table"]
    out = capsys.readouterr().out
    print(out[-3000:])  # the snippet's output, shown when the test fails

    assert result.exit_code == 0 and result.launched == 1
    assert [(row["spec"], row["state"]) for row in result.rows] == [("base-s42", runs.SUCCEEDED)]
    run_dir = result.run_dir("base-s42")
    assert run_dir.parent.parent == tmp_path and (run_dir / "eval" / "results.json").is_file()
    assert "0 [('base-s42', 'SUCCEEDED')]" in out

    base = table.set_index("row").loc["base"]
    assert base["model"] == "Base Transformer"
    assert base["val_ppl"] > 1 and 0 <= base["avg6"] <= 100  # a measured perplexity and accuracy, not a blank
    assert base["val_ppl paper"] > 1  # the paper's number beside it
    assert "preset smoke" in base["not comparable"]
    assert pd.isna(table.set_index("row").loc["gated", "val_ppl"])  # not run: no value made up
    assert table.attrs["preset"] == "smoke"

    again = namespace["run_target"]("base-s42", preset="smoke", overrides=namespace["quick"], backend="inline")
    assert again.exit_code == 0 and again.launched == 0 and again.rows[0]["action"] == "skip"
