"""`report` on a terminal says which phase it is in (one short stderr line each); in a pipe or a log, nothing."""

from __future__ import annotations

import io


from synthetic import make_run, registry, uniform

from exoformer.cli.report import phase_lines
from exoformer.report.pages import html as report_html


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_report_phases_on_a_terminal_only(tmp_path):
    runs = tmp_path / "runs"
    for i, row in enumerate(("base", "gated")):
        make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3 + 0.02 * i), ppl=40.0 - i,
                 task_prefix="smoke_")
    terminal, pipe = _Terminal(), io.StringIO()
    with phase_lines(terminal):
        report_html.build_report(registry(), ["table1"], runs_root=runs, out_dir=tmp_path / "out", preset="smoke")
    with phase_lines(pipe):
        report_html.build_report(registry(), ["table1"], runs_root=runs, out_dir=tmp_path / "out2", preset="smoke")
    lines = terminal.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines][:3] == ["report: reading the runs",
                                                          "report: building 1 table, 8 figures and the verdicts",
                                                          "report: drawing 8 figures"]  # each count names its unit
    assert all(line.endswith(" s)") for line in lines)
    assert pipe.getvalue() == ""
    assert not report_html.PHASES.handlers  # the handler went with the command
