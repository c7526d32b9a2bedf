"""`report` says which phase it is in, one short stderr line each, on a terminal and in a pipe or a log alike."""

from __future__ import annotations

import io


from synthetic import make_run, registry, uniform

from exoformer.cli.report import phase_lines
from exoformer.report.pages import html as report_html


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_report_phases_on_a_terminal_and_off_one(tmp_path):
    runs = tmp_path / "runs"
    for i, row in enumerate(("base", "gated")):
        make_run(runs, f"{row}-s42", preset="smoke", accuracies=uniform(0.3 + 0.02 * i), ppl=40.0 - i,
                 task_prefix="smoke_")
    terminal, pipe = _Terminal(), io.StringIO()
    with phase_lines(terminal):
        report_html.build_report(registry(), ["table1"], runs_root=runs, out_dir=tmp_path / "out", preset="smoke")
    with phase_lines(pipe):
        report_html.build_report(registry(), ["table1"], runs_root=runs, out_dir=tmp_path / "out2", preset="smoke")
    for stream in (terminal, pipe):  # a pipe or a log sees the same lines: an 85 s report is never silent
        lines = stream.getvalue().splitlines()
        assert [line.split(" (")[0] for line in lines] == ["report: found 2 run directories",
                                                           "report: building 1 table, 8 figures and the verdicts",
                                                           "report: drawing 8 figures",
                                                           "report: writing the page and the files of 2 run "
                                                           "directories"]  # each count names its unit
        assert all(line.endswith(" s)") for line in lines)
    assert not report_html.PHASES.handlers  # the handler went with the command


def test_the_report_verb_prints_its_phases_in_a_pipe(tmp_path):
    from smoke_runs import cli

    runs = tmp_path / "runs"
    make_run(runs, "base-s42", preset="smoke", accuracies=uniform(0.3), ppl=40.0, task_prefix="smoke_")
    done = cli("report", "table1", "--preset", "smoke", "--out", str(tmp_path / "out"), runs_dir=runs, check=True)
    phases = [line for line in done.stderr.splitlines() if line.startswith("report: ")]
    assert phases[0].startswith("report: found 1 run directory (") and len(phases) == 4, done.stderr
