"""The stage context's typed spec: the registry's Spec and a checkpoint run's CheckpointSpec both provide what
stages read (exoformer.stage.RunSpec), and the run kind comes from the spec's declared source."""

from dataclasses import fields

from exoformer.checkpoint_import.checkpoint_run import CheckpointSpec
from exoformer.registry.registry import Registry
from exoformer.run_identity import CHECKPOINT, OURS
from exoformer.stage import AnalysisSettings, EvalSettings, RunSpec, run_source


def _specs():
    spec = Registry().resolve("base-s42", preset="smoke")
    imported = CheckpointSpec(**{f.name: getattr(spec, f.name) for f in fields(spec)}, checkpoint_path="/x.pt",
                              checkpoint_sha256="0" * 64, checkpoint_size=1, as_row="base", table="table1")
    return spec, imported


def test_both_kinds_of_spec_provide_what_stages_read():
    for spec in _specs():
        assert isinstance(spec, RunSpec)
        assert isinstance(spec.eval, EvalSettings) and isinstance(spec.analysis, AnalysisSettings)


def test_the_run_kind_is_the_spec_source_not_its_stage_list():
    trained, imported = _specs()
    assert run_source(trained) == OURS and run_source(imported) == CHECKPOINT
    assert imported.to_dict()["source"] == CHECKPOINT  # what identity.json's source is derived from


def test_a_spec_lacking_a_section_is_not_a_run_spec():
    class Partial:
        name, seed, variant, shape, hash12 = "x", 0, "base", "smoke", "0" * 12

        def semantic(self):
            return {}

        def stage_functions(self):
            return {}

    assert not isinstance(Partial(), RunSpec)
