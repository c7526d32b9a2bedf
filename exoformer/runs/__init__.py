"""The run lifecycle: plan, placement checks, launch, the pipeline and its stages, backends, status, locks and the run index."""
