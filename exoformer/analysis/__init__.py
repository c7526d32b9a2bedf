"""The paper's analyses: per-layer probes of a trained model and training-stability spike scores.

`metrics` holds the exact metric definitions as pure functions (docs/official_code.md 6.2); `probes.run_probes`
runs them layer by layer through the model's streaming inspection mode and returns JSON-ready results.
Both import torch; the torch-free report layer reads their JSON output, never these modules. The package itself
imports nothing, so that `stage` (which the launcher reaches when it pickles a job) loads torch only when it runs.
"""
