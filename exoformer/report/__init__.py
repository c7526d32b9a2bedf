"""The report layer: collect run results into one long table, rebuild the paper's tables, diff them against
the reported numbers, draw the figures. `collect`, `tables`, `diff` and `rank` never import torch."""
