"""The bundled smoke world: facts (facts.py), their wording (phrasing.py), the training corpus (corpus.py)
and the six evaluation tasks (tasks.py), all deterministic, so the whole pipeline runs offline on a laptop."""
