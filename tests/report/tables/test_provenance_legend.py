"""Issue 41 item 2: every paper value's source tag is explained once per output, with the source's strength.

`table` (md, latex), `diff` and the HTML report's table sections each end in a legend of the tags they show
([WEB]: an LLM-generated explanation of arXiv v4, secondary); a secondary value never reads as the paper's own
(its tag is beside it, or named once for the whole table); `diff` says which sources back the compared cells.
"""

from __future__ import annotations

import re

from synthetic import make_run, read_table, registry, uniform

from exoformer.cli import main
from exoformer.report.pages import html as report_html
from exoformer.report.tables.build import render
from exoformer.report.tables.diff import diff_table, render_diff


def _legend(text: str) -> dict[str, str]:
    """tag -> its legend line, from every line that explains a tag ("[WEB] = ...")."""
    return {m.group(1): line for line in text.splitlines() if (m := re.search(r"\[([\w-]+)\] (?:\([^)]*\) )?= ", line))}


def test_the_sources_of_reported_yaml_have_a_strength():
    from exoformer.registry.reported import AUTHOR, PRIMARY, SECONDARY, load_sources, source_legend

    sources = load_sources(registry())
    assert sources["WEB"].strength == SECONDARY and "LLM-generated explanation of arXiv v4" in sources["WEB"].text
    assert sources["N-v3"].strength == SECONDARY and sources["WIZ"].strength == SECONDARY
    assert sources["A-v1"].strength == PRIMARY and sources["RED"].strength == AUTHOR
    (line,) = source_legend(["WEB"], sources, versions={"WEB": ["v4"]})
    assert line.startswith("[WEB] = author's site, LLM-generated explanation of arXiv v4")
    assert "paper v4" in line and "secondary: a machine-generated or third-party account, not the paper's own" in line


def test_table_md_explains_each_tag_it_shows_once_and_names_the_source_of_the_paper_column(tmp_path, capsys):
    assert main(["table", "table1", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    legend = _legend(out)
    # the values' tag and the tags of the title ([N-v3]); no tag the output does not show
    assert set(legend) == {"WEB", "N-v3"}
    assert all(sum(1 for line in out.splitlines() if re.search(rf"\[{tag}\] (\([^)]*\) )?= ", line)) == 1
               for tag in legend)
    assert "secondary" in legend["WEB"] and "15 paper values" in legend["WEB"] and "arXiv v4" in legend["WEB"]
    # one source behind every paper value: the heading names it beside "paper" (never read as the paper's own)
    assert "each cell: ours / paper [WEB] (" in out


def test_table_latex_carries_the_legend_as_comments(tmp_path):
    text = render(read_table(tmp_path, "table1"), "latex")
    lines = [line for line in text.splitlines() if "[WEB] (15 paper values" in line]
    assert len(lines) == 1 and lines[0].startswith("% ") and "secondary" in lines[0]


def test_a_table_of_several_sources_tags_each_value_and_says_which_is_primary(tmp_path):
    text = render(read_table(tmp_path, "claims"), "md")
    assert "not run / 0.95 [RED]" in text and "not run / 2.00 [A-v1]" in text and "not run / 1.50 [A-v2]" in text
    legend = _legend(text)
    assert set(legend) == {"RED", "A-v1", "A-v2"}
    assert "primary: the paper's own text" in legend["A-v1"] and "author: the author's own words" in legend["RED"]


def test_diff_tags_each_paper_value_and_says_which_sources_back_the_compared_cells(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.40), ppl=14.8)
    make_run(tmp_path, "gated-s42", accuracies=uniform(0.41), ppl=14.6)
    out = render_diff(diff_table(read_table(tmp_path, "table1")))
    base = next(line for line in out.splitlines() if line.startswith("base ") and "val_ppl" in line)
    assert "14.79 [WEB]" in base
    assert "compared with the paper: 4 cells, 4 from [WEB] (secondary); 11 paper values without our value, " \
           "11 from [WEB] (secondary)" in out
    legend = _legend(out)
    assert {"WEB", "N-v3"} <= set(legend) and "secondary" in legend["WEB"]
    assert out.count("[WEB] (15 paper values of this table) =") == 1


def test_diff_on_an_empty_root_names_the_sources_of_the_paper_values_it_lists(tmp_path, capsys):
    main(["diff", "table1", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "compared with the paper: 0 cells; 15 paper values without our value, 15 from [WEB] (secondary)" in out
    # the column maxima ([WIZ], an automatic extraction) carry their tag and the legend explains it once
    assert "column maxima (the paper's best per column, row unknown; min for lower-is-better, all from [WIZ]):" in out
    legend = _legend(out)
    assert set(legend) == {"WEB", "N-v3", "WIZ"} and "secondary" in legend["WIZ"]


def test_the_html_report_has_a_sources_footnote_under_each_table(tmp_path):
    make_run(tmp_path, "base-s42", accuracies=uniform(0.40), ppl=14.8)
    section = report_html.table_html(diff_table(read_table(tmp_path, "table1")), "tables/table1.csv")
    footnote = re.search(r'<div class="note sources" data-sources="WEB">(.*?)</div>', section, re.S)
    assert footnote is not None and section.index(footnote.group(0)) > section.index("</table>")
    text = footnote.group(1)
    assert "paper values: 15 from [WEB] (secondary)" in text
    assert text.count("<li>") == 2 and "[WEB] (15 paper values of this table) = " in text
    assert "[N-v3] = third-party note quoting v3" in text and "secondary: a machine-generated" in text


def test_the_html_verdicts_explain_the_tags_of_the_paper_values_they_show(tmp_path):
    from exoformer.report.reading.selection import read
    from exoformer.report.tables.compose import claim_specs
    from exoformer.report.tables.verdicts import all_verdicts, verdicts_html

    reg = registry()
    page = verdicts_html(all_verdicts(reg, selection=read(reg, tmp_path, claim_specs(reg), what="claims")))
    assert "+2.13 [A-v1]" in page and "+1.47 [WEB]" in page  # the paper column shows the tags
    footnote = re.search(r'<div class="note sources" data-sources="([^"]*)">(.*?)</div>', page, re.S)
    assert footnote is not None and set(footnote.group(1).split()) == {"WEB", "A-v1"}
    assert "[A-v1] = arXiv v1 abstract; primary: the paper&#x27;s own text" in footnote.group(2)
    assert "[WEB] = author&#x27;s site, LLM-generated explanation of arXiv v4" in footnote.group(2)
    assert "secondary: a machine-generated or third-party account" in footnote.group(2)
