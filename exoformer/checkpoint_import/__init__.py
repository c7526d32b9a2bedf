"""Checkpoint files (the author's released ones or ours) evaluated as a table row."""
