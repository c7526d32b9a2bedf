"""The facts of each evaluation task, written once: every consumer reads them from here.

The suites (exoformer/eval/suites.py: config file, expected metrics), the prefetch check (documents lm-eval
scores), the cost of a checkpoint run's evaluation (exoformer/checkpoint_import/checkpoint_run.py: requests and tokens),
the tables and the report (the default metric, which task has no length-normalised metric) and the
accuracy bars (the chance level) all read TASK_FACTS. Facts are those of lm-eval 0.4.13's configs
(docs/official_code.md section 5, docs/ecosystem.md A3); the shots are the paper's (docs/paper.md 4.2).
Torch-free and import-free, so the harness and the report can read it without lm-eval.
"""

from __future__ import annotations

from dataclasses import dataclass

SHOTS = 5
"""Few-shot examples per prompt in the paper's evaluation (docs/paper.md 4.2)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class TaskFacts:
    name: str
    config: str
    """The task's YAML inside lm_eval/tasks."""
    splits: tuple[str, ...]
    """Every split the config names (each must exist as a file offline, even with zero shots)."""
    scored_split: str
    """The split lm-eval scores: test when the config has one, else validation."""
    documents: int
    """Documents of scored_split: a different count means different data than the paper's."""
    choices: int
    """Answer choices per document: one loglikelihood request each."""
    metrics: tuple[str, ...]
    """What lm-eval reports for the task."""
    convention: str
    """The metric the paper's tables use for the task [inference: docs/paper.md 4.2]."""
    tokens_per_request: int
    """GPT-2 tokens per 5-shot request, context + continuation [inference: 6 x the mean length of one document
    as prompt text; `python -m exoformer.eval.request_stats data/tasks` measures it on the prefetched files]."""
    special: str = ""
    """What differs from plain multiple choice scoring."""

    @property
    def requests(self) -> int:
        """Loglikelihood requests of a full evaluation: documents x choices."""
        return self.documents * self.choices

    @property
    def chance(self) -> float:
        """Accuracy of a uniform guess, as a fraction."""
        return 1.0 / self.choices

    @property
    def normalised(self) -> bool:
        """Whether lm-eval also reports the length-normalised acc_norm."""
        return "acc_norm" in self.metrics


_ARC_NOTE = "a few questions have 3 or 5 choices (requests +-1%)"
TASK_FACTS: dict[str, TaskFacts] = {t.name: t for t in (
    TaskFacts(name="arc_challenge", config="arc/arc_challenge.yaml", splits=("test", "train", "validation"),
              scored_split="test", documents=1172, choices=4, metrics=("acc", "acc_norm"), convention="acc_norm",
              tokens_per_request=260, special=_ARC_NOTE),
    TaskFacts(name="arc_easy", config="arc/arc_easy.yaml", splits=("test", "train", "validation"),
              scored_split="test", documents=2376, choices=4, metrics=("acc", "acc_norm"), convention="acc_norm",
              tokens_per_request=230, special=_ARC_NOTE),
    TaskFacts(name="hellaswag", config="hellaswag/hellaswag.yaml", splits=("train", "validation"),
              scored_split="validation", documents=10042, choices=4, metrics=("acc", "acc_norm"),
              convention="acc_norm", tokens_per_request=620, special="documents rewritten by its process_docs"),
    TaskFacts(name="openbookqa", config="openbookqa/openbookqa.yaml", splits=("test", "train", "validation"),
              scored_split="test", documents=500, choices=4, metrics=("acc", "acc_norm"), convention="acc_norm",
              tokens_per_request=110),
    TaskFacts(name="piqa", config="piqa/piqa.yaml", splits=("train", "validation"), scored_split="validation",
              documents=1838, choices=2, metrics=("acc", "acc_norm"), convention="acc_norm", tokens_per_request=270),
    TaskFacts(name="winogrande", config="winogrande/default.yaml", splits=("train", "validation"),
              scored_split="validation", documents=1267, choices=2, metrics=("acc",), convention="acc",
              tokens_per_request=180,
              special="partial scoring: each choice fills the blank and only the rest of the sentence is scored, "
                      "so there is no length-normalised acc_norm"),
)}
"""Task name -> its facts, in the paper's column order."""

PAPER_TASKS = tuple(TASK_FACTS)


def mean_chance(tasks: tuple[str, ...] = PAPER_TASKS) -> float:
    """The chance level of the mean accuracy over `tasks` (the tables' avg6): the mean of their chance levels."""
    return sum(TASK_FACTS[t].chance for t in tasks) / len(tasks)
