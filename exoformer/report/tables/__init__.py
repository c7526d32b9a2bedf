"""The paper's tables, claims and verdicts rebuilt from the selected runs."""
