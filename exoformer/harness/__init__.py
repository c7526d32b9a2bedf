"""The experiment harness: spec schema and hashing, the registry, cost model, profiles, and the CLI verbs.

Everything here except the job backends is torch-free (docs/architecture.md), so planning answers fast.
"""
