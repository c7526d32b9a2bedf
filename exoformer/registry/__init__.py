"""Declarations: the registry of specs, tables, figures and claims, the reported numbers, cluster profiles and their validation (torch-free)."""
