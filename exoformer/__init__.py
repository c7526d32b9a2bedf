"""ExoFormer reproduction harness: one model family, the paper's recipe, a registry of runs, and reports.

The top-level package imports nothing heavy, so the planning verbs of the CLI stay torch-free.
"""

__version__ = "0.1.0"
