"""The six smoke tasks: committed files equal the generator's, checksums, schemas, gold answers, balance."""

import collections
import shutil

import pytest

from exoformer.data.smoke import tasks as t
from exoformer.errors import UserError

SCHEMAS = {
    "smoke_arc_easy": {"id", "question", "choices", "answerKey"},
    "smoke_arc_challenge": {"id", "question", "choices", "answerKey"},
    "smoke_openbookqa": {"id", "question_stem", "choices", "answerKey"},
    "smoke_hellaswag": {"ind", "activity_label", "ctx_a", "ctx_b", "ctx", "endings", "source_id", "split",
                        "split_type", "label"},
    "smoke_piqa": {"goal", "sol1", "sol2", "label"},
    "smoke_winogrande": {"sentence", "option1", "option2", "answer"},
}


@pytest.fixture(scope="module")
def built():
    return t.build_tasks()


def test_committed_files_equal_the_generator_output():
    assert t.check() == []
    assert t.main(["--check"]) == 0
    t.verify_smoke_data()


def test_smoke_task_files_lists_every_split_as_the_builtin_configs_name_them():
    files = t.smoke_task_files()
    assert set(files) == set(t.TASKS) == set(t.CHANCE)
    assert set(files["smoke_arc_easy"]) == {"train", "validation", "test"}
    assert set(files["smoke_hellaswag"]) == {"train", "validation"}
    assert all(path.is_file() for splits in files.values() for path in splits.values())
    assert t.CHANCE["smoke_piqa"] == 0.5 and t.CHANCE["smoke_openbookqa"] == 0.25


def test_checksum_mismatch_and_missing_file_name_the_file(tmp_path):
    root = tmp_path / "smoke_data"
    shutil.copytree(t.SMOKE_DATA_DIR, root)
    t.verify_smoke_data(root)
    target = root / "smoke_piqa" / "validation.jsonl"
    target.write_bytes(target.read_bytes().replace(b"Use", b"Try", 1))
    with pytest.raises(UserError, match="checksum mismatch") as info:
        t.verify_smoke_data(root)
    assert str(target) in str(info.value) and "\n" not in str(info.value)
    assert any(str(target) in problem for problem in t.check(root))
    target.unlink()
    with pytest.raises(UserError, match="missing"):
        t.verify_smoke_data(root)


def test_schemas_gold_among_choices_and_distinct_choices(built):
    for task, splits in built.items():
        for split, docs in splits.items():
            assert len(docs) == t.SPLITS[task][split]
            for doc in docs:
                assert set(doc) == SCHEMAS[task], (task, doc)
                gold, choices = t.gold_and_choices(task, doc)
                assert len(choices) == t.N_CHOICES[task] == round(1 / t.CHANCE[task])
                assert 0 <= gold < len(choices) and len(set(choices)) == len(choices)
            if task == "smoke_winogrande":
                assert all(doc["sentence"].count("_") == 1 and doc["answer"] in ("1", "2") for doc in docs)
            if task == "smoke_piqa":
                assert all(isinstance(doc["label"], int) for doc in docs)


def test_gold_positions_are_balanced(built):
    for task, splits in built.items():
        for split, docs in splits.items():
            counts = collections.Counter(t.gold_and_choices(task, doc)[0] for doc in docs)
            assert set(counts) == set(range(t.N_CHOICES[task]))
            assert max(counts.values()) - min(counts.values()) <= 1, (task, split, counts)


def test_gold_answers_are_the_worlds_facts(built):
    from exoformer.data.smoke.facts import world

    towns = {p.name: p.town for p in world().people}
    foods = {p.name: p.food for p in world().people}
    for doc in built["smoke_arc_easy"]["test"]:
        gold, choices = t.gold_and_choices("smoke_arc_easy", doc)
        if doc["question"].startswith("Where does ") and doc["question"].split()[2] in towns:
            assert choices[gold].endswith(f" lives in {towns[doc['question'].split()[2]]}.")
    checked = 0
    for doc in built["smoke_winogrande"]["validation"]:
        gold, options = t.gold_and_choices("smoke_winogrande", doc)
        if "went shopping" in doc["sentence"]:
            assert doc["sentence"].endswith(f"_ bought {foods[options[gold]]} for lunch.")
            assert not doc["sentence"].endswith(f"_ bought {foods[options[1 - gold]]} for lunch.")
            checked += 1
    assert checked > 20


def test_no_question_in_two_splits(built):
    for task in ("smoke_arc_easy", "smoke_arc_challenge"):
        seen = [{doc["question"] for doc in docs} for docs in built[task].values()]
        assert sum(len(s) for s in seen) == len(set().union(*seen))


def test_hellaswag_docs_read_through_lm_eval_process_docs(built):
    datasets = pytest.importorskip("datasets")
    from lm_eval.tasks.hellaswag.utils import process_docs

    docs = built["smoke_hellaswag"]["validation"][:40]
    processed = process_docs(datasets.Dataset.from_list(docs))
    for doc, out in zip(docs, processed):
        assert out["gold"] == int(doc["label"]) and out["choices"] == doc["endings"]
        assert [f"{out['query']} {c}" for c in out["choices"]] == t.prompt_texts("smoke_hellaswag", doc)
        assert any(name in out["query"] for name in ("Working", "Pets", "Lunch", "Accidents", "Nature"))


def test_winogrande_docs_read_through_lm_eval_partial_scoring(built):
    from lm_eval.tasks.winogrande import preprocess_winogrande as wg

    for doc in built["smoke_winogrande"]["validation"][:40]:
        contexts = wg.doc_to_choice(doc)
        target = wg.doc_to_target(doc)
        assert [f"{c} {target}" for c in contexts] == t.prompt_texts("smoke_winogrande", doc)
        assert wg.doc_to_text(doc) == int(doc["answer"]) - 1


def test_two_choice_rivals_are_about_as_famous_as_the_gold(built):
    """WinoGrande and PIQA pit the gold against a near neighbour in salience rank, so ruling out a famous
    rival does not give the answer."""
    from exoformer.data.smoke.facts import salience, world

    w = world()
    rank = {p.name: r for r, p in enumerate(sorted(w.people, key=dict(zip(w.people, salience(w.people))).get,
                                                   reverse=True))}
    gaps = []
    for docs in built["smoke_winogrande"].values():
        for doc in docs:
            gaps.append(abs(rank[doc["option1"]] - rank[doc["option2"]]))
    assert max(gaps) <= 8 and sum(gaps) / len(gaps) < 3 and len(gaps) == sum(t.SPLITS["smoke_winogrande"].values())
    tool_rank = {f"Use {tool.tool}.": r for r, tool in enumerate(
        sorted(w.tools, key=dict(zip(w.tools, salience(w.tools))).get, reverse=True))}
    tool_gaps = [abs(tool_rank[doc["sol1"]] - tool_rank[doc["sol2"]]) for doc in built["smoke_piqa"]["validation"]
                 if doc["sol1"] in tool_rank]
    assert tool_gaps and max(tool_gaps) <= 7
