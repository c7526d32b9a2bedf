"""The report layer: read the runs each spec's results come from, rebuild the paper's tables, diff them against
the reported numbers, draw the figures. `table`, `diff` and `rank` never import torch."""

NOT_RUN = "not run"
"""What a cell, line or panel says when the run it needs does not exist (never a made-up value)."""
NOT_REPORTED = "not known"
"""What a paper cell says when no source we read gives its number (results/paper/reported.yaml has no entry):
the paper may report it, we do not know it."""
NO_VALUE = "no value"
"""What a cell says when its run has the metric but no number for it (a spike score before enough steps)."""
