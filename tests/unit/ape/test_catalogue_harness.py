"""The catalogue's multiple-choice prompts, choices and gold answers are lm-evaluation-harness's:
each is built here both ways, from the harness's own task files and helpers (where it is
installed) and from the config `ape init` writes, on rows in the datasets' shapes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ape.catalogue import config_text
from ape.schemas.benchmark_items import ARCItem, HellaSwagItem, MMLUHubItem
from ape.schemas.choices import ChoicesConfig
from ape.tasks.solving.choices import choice_texts, gold_index
from ape.tasks.solving.render import render

lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed")
yaml = pytest.importorskip("yaml")
TASKS = Path(lm_eval.__file__).parent / "tasks"

MMLU_ROW = {
    "question": "  What is the closest star to Earth?\n",
    "subject": "astronomy",
    "choices": ["Proxima Centauri", "The Sun", "Sirius", "Vega"],
    "answer": 1,
}
ARC_ROW = {
    "id": "Mercury_7",
    "question": "Which property of a mineral can be determined just by looking at it?",
    "choices": {"text": ["luster", "mass", "weight", "hardness"], "label": ["A", "B", "C", "D"]},
    "answerKey": "A",
}
HELLASWAG_ROW = {
    "ind": 24,
    "activity_label": "Roof shingle removal",
    "ctx_a": "A man is sitting on a roof.",
    "ctx_b": "he",
    "endings": [
        "is using wrap to wrap a pair of skis.",
        "is ripping level tiles off. [title] Remove the shingles.",
        "is holding a rubik's cube.",
        "starts pulling up roofing on a roof.",
    ],
    "label": "3",
}


def ours(name: str, row: dict, model: type) -> tuple[str, list[str], int]:
    config = tomllib.loads(config_text(name))
    item = model.model_validate(row, context={"line": 1})
    choices = ChoicesConfig.model_validate(config["choices"])
    texts = choice_texts(item, choices)
    return render(config["prompt"]["template"], item), texts, gold_index(item, choices, texts)


def task_file(relative: str) -> dict:
    return yaml.safe_load((TASKS / relative).read_text())


def test_mmlu_prompt_is_the_harness_description_and_question():
    from lm_eval.utils import apply_template

    template = task_file("mmlu/default/_default_template_yaml")
    description = task_file("mmlu/default/mmlu_astronomy.yaml")["description"]
    harness = description + apply_template(template["doc_to_text"], MMLU_ROW)
    prompt, choices, gold = ours("mmlu", MMLU_ROW, MMLUHubItem)
    assert prompt == harness
    assert (choices, gold) == (MMLU_ROW["choices"], MMLU_ROW["answer"])  # scored as letters: [choices] letter


@pytest.mark.parametrize("name", ["arc_easy", "arc_challenge"])
def test_arc_prompt_choices_and_gold(name):
    from lm_eval.utils import apply_template

    task = task_file("arc/arc_easy.yaml")
    prompt, choices, gold = ours(name, ARC_ROW, ARCItem)
    assert prompt == apply_template(task["doc_to_text"], ARC_ROW)
    assert choices == ARC_ROW["choices"]["text"]
    assert gold == int(apply_template(task["doc_to_target"], ARC_ROW))


def test_hellaswag_context_cleaning_choices_and_gold():
    import datasets
    from lm_eval.tasks.hellaswag.utils import process_docs

    (doc,) = process_docs(datasets.Dataset.from_list([HELLASWAG_ROW]))
    prompt, choices, gold = ours("hellaswag", HELLASWAG_ROW, HellaSwagItem)
    assert (prompt, choices, gold) == (doc["query"], doc["choices"], doc["gold"])
