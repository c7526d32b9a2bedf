"""The paper's analyses (issue 7): per-layer probes of a trained model and training-stability spike scores.

`metrics` holds the exact metric definitions as pure functions (docs/official_code.md 6.2); `probes.run_probes`
runs them layer by layer through the model's streaming inspection mode and returns JSON-ready results.
Both import torch; the torch-free report layer reads their JSON output, never these modules.
"""

from exoformer.analysis.metrics import (
                                        attention_entropy,
                                        coefficient_stats,
                                        first_token_attention,
                                        gate_stats,
                                        layer_similarity_matrix,
                                        massive_activation,
                                        pca_components,
                                        similarity_to_embeddings,
                                        spike_mask,
                                        spike_score,
                                        spike_scores_from_metrics,
                                        token_similarity,
)
from exoformer.analysis.probes import ABLATIONS, run_probes

__all__ = ["ABLATIONS", "attention_entropy", "coefficient_stats", "first_token_attention", "gate_stats",
           "layer_similarity_matrix", "massive_activation", "pca_components", "run_probes", "similarity_to_embeddings",
           "spike_mask", "spike_score", "spike_scores_from_metrics", "token_similarity"]
