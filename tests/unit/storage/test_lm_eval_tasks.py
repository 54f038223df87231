"""``[task] lm_eval`` configs: compiled into a content-hashed data file by the loader, and
every input APE cannot run refused in one line before any model call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.schemas.lm_eval import LmEvalItem
from tests.helpers.lm_eval_data import arc_rows, needs_lm_eval, offline, write_arc, write_gsm8k, write_lambada

needs_lm_eval()

MODEL = '[model]\nprovider = "mock"\nmodel = "oracle"\nargs = { field = "target" }\n'


def _config(tmp_path: Path, task: str, extra: str = "") -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"{extra}[task]\n{task}\n{MODEL}", encoding="utf-8")
    return path


def _load(path: Path):
    from ape.config import load_config

    return load_config(path)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    offline(monkeypatch)


def test_a_task_becomes_a_data_file_named_by_its_content(tmp_path: Path) -> None:
    write_gsm8k(tmp_path, test=5)
    files = '{ train = "gsm8k/train.jsonl", test = "gsm8k/test.jsonl" }'
    config = _load(_config(tmp_path, f'lm_eval = "gsm8k"\nnum_fewshot = 2\nlimit = 4\ndata_files = {files}'))
    assert config.data.file.parent == config.run.output / "lm_eval"
    assert config.data.file.name.startswith("gsm8k-")
    items = [LmEvalItem.model_validate_json(line) for line in config.data.file.read_text().splitlines()]
    assert [item.id for item in items] == [f"gsm8k/{i}" for i in range(4)]  # limit
    assert items[0].until == ["Question:", "</s>", "<|im_end|>"]
    assert items[0].context.count("Question:") == 3 and items[0].context.endswith("Answer:")
    assert items[0].target.endswith("#### 4")
    assert config.prompt.template == "{{context}}" and config.data.category_field == "task"
    assert config.checker.args["task"]["lm_eval"] == "gsm8k"
    again = _load(_config(tmp_path, f'lm_eval = "gsm8k"\nnum_fewshot = 2\nlimit = 4\ndata_files = {files}'))
    assert again.data.file == config.data.file  # same content, same file: resume and the cache hold
    other = _load(_config(tmp_path, f'lm_eval = "gsm8k"\nnum_fewshot = 1\nlimit = 4\ndata_files = {files}'))
    assert other.data.file != config.data.file


def test_an_unknown_task_is_one_line_with_close_names(tmp_path: Path) -> None:
    with pytest.raises(ApeError) as caught:
        _load(_config(tmp_path, 'lm_eval = "gsm8kk"'))
    text = str(caught.value)
    assert "config.toml:2 [task.lm_eval]: unknown lm-evaluation-harness task 'gsm8kk'" in text
    assert "close names: gsm8k" in text and "\n" not in text


def test_a_rolling_log_likelihood_task_is_refused_before_its_data_is_read(tmp_path: Path) -> None:
    with pytest.raises(ApeError) as caught:
        _load(_config(tmp_path, 'lm_eval = "wikitext"'))  # no data given: the refusal comes first
    text = str(caught.value)
    assert "task 'wikitext' is a loglikelihood_rolling task" in text and "multiple_choice" in text
    assert "\n" not in text


def test_a_multiple_choice_task_becomes_choice_items_and_a_choices_section(tmp_path: Path) -> None:
    files = write_arc(tmp_path, test=5)
    table = ", ".join(f'{k} = "{v}"' for k, v in files.items())
    config = _load(_config(tmp_path, f'lm_eval = "arc_easy"\nnum_fewshot = 1\ndata_files = {{ {table} }}'))
    items = [LmEvalItem.model_validate_json(line) for line in config.data.file.read_text().splitlines()]
    rows = arc_rows(5)
    assert [item.choices for item in items] == [row["choices"]["text"] for row in rows]  # 3 or 4 choices
    assert [item.gold for item in items] == [row["choices"]["label"].index(row["answerKey"]) for row in rows]
    assert items[0].context.count("Question:") == 2 and items[0].context.endswith("\nAnswer:")
    assert config.choices is not None and config.choices.delimiter == " " and config.choices.gold == "gold"
    assert config.checker.implementation.endswith("LmEvalChecker")  # the harness scores the choices


def test_a_task_of_several_contexts_is_refused(tmp_path: Path) -> None:
    rows = [{"sentence": "Ann gave Bea a pen because _ had a pen.", "option1": "Ann", "option2": "Bea", "answer": "1"}]
    (tmp_path / "w.jsonl").write_text("\n".join(json.dumps(r) for r in rows * 3), encoding="utf-8")
    files = '{ train = "w.jsonl", validation = "w.jsonl" }'
    with pytest.raises(ApeError) as caught:
        _load(_config(tmp_path, f'lm_eval = "winogrande"\ndata_files = {files}'))
    text = str(caught.value)
    assert "task 'winogrande' scores one continuation after several contexts" in text and "\n" not in text


def test_repeated_generations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ApeError, match=r"asks 64 generations per document \(repeats\)"):
        _load(_config(tmp_path, 'lm_eval = "gsm8k_cot_self_consistency"'))


def test_a_missing_data_set_names_it_and_the_two_ways_to_give_it(tmp_path: Path) -> None:
    with pytest.raises(ApeError) as caught:
        _load(_config(tmp_path, 'lm_eval = "gsm8k"'))
    text = str(caught.value)
    assert "the data set 'openai/gsm8k' (configuration 'main', split test) is neither cached nor given" in text
    assert "[task] data_files" in text and "HF_DATASETS_OFFLINE=1" in text and "\n" not in text


def test_a_split_the_files_lack_is_named(tmp_path: Path) -> None:
    write_gsm8k(tmp_path)
    with pytest.raises(ApeError, match=r"\[task.data_files\]: task 'gsm8k' reads the split 'train'"):
        _load(_config(tmp_path, 'lm_eval = "gsm8k"\ndata_files = { test = "gsm8k/test.jsonl" }'))


def test_sections_the_task_stands_for_are_refused_beside_it(tmp_path: Path) -> None:
    data = '[data]\nfile = "d.jsonl"\nschema = "m:M"\n'
    with pytest.raises(ApeError, match=r"\[task\] lm_eval replaces \[data\]"):
        _load(_config(tmp_path, 'lm_eval = "gsm8k"', extra=data))


def test_a_task_file_of_ones_own_with_its_include_and_hook(tmp_path: Path) -> None:
    """A task file beside the config: its ``include`` and a ``!function`` hook in a module beside it."""
    write_gsm8k(tmp_path)
    (tmp_path / "hooks.py").write_text(
        "def shout(doc):\n    return 'Q: ' + doc['question'].upper() + '\\nA:'\n", encoding="utf-8"
    )
    (tmp_path / "_base.yaml").write_text(
        "output_type: generate_until\ndataset_path: json\ntest_split: test\n"
        'generation_kwargs:\n  until: ["\\n\\n"]\nmetric_list:\n  - metric: exact_match\n',
        encoding="utf-8",
    )
    (tmp_path / "mine.yaml").write_text(
        "include: _base.yaml\ntask: shouty\ndoc_to_text: !function hooks.shout\n"
        "doc_to_target: \"{{answer.split('#### ')[-1]}}\"\n"
        f"dataset_kwargs:\n  data_files:\n    test: {tmp_path / 'gsm8k' / 'test.jsonl'}\n",
        encoding="utf-8",
    )
    config = _load(_config(tmp_path, 'lm_eval = "mine.yaml"'))
    items = [LmEvalItem.model_validate_json(line) for line in config.data.file.read_text().splitlines()]
    assert items[0].id == "shouty/0" and items[0].context.startswith("Q: ANN HAS 1 BOXES")
    assert items[0].until == ["\n\n"] and items[0].target == "4"


def test_generation_settings_not_sent_are_said_in_one_line(tmp_path: Path) -> None:
    from ape.tasks.storage.lm_eval_tasks import generation_asks

    write_gsm8k(tmp_path, test=3)
    files = '{ train = "gsm8k/train.jsonl", test = "gsm8k/test.jsonl" }'
    options = 'options = { generation_kwargs = { until = ["Question:"], do_sample = false, top_p = 0.9 } }'
    config = _load(_config(tmp_path, f'lm_eval = "gsm8k"\nnum_fewshot = 1\ndata_files = {files}\n{options}'))
    assert config.task is not None
    asks, lines = generation_asks(config.task, config.base_dir)
    assert asks == {"stop": ["Question:"], "temperature": 0.0}
    assert len(lines) == 1 and lines[0].startswith("task 'gsm8k' asks top_p = 0.9: not sent")


GENERATION = (
    'options = { generation_kwargs = { until = ["Question:", "\\n\\n"], do_sample = false, max_gen_toks = 64 } }'
)


def _gsm8k_endpoint_config(tmp_path: Path, base_url: str, model_extra: str = "") -> Path:
    write_gsm8k(tmp_path, test=3)
    files = '{ train = "gsm8k/train.jsonl", test = "gsm8k/test.jsonl" }'
    path = tmp_path / "config.toml"
    path.write_text(
        f'[task]\nlm_eval = "gsm8k"\nnum_fewshot = 1\ndata_files = {files}\n{GENERATION}\n'
        f'[model]\nprovider = "openai"\nmodel = "m"\nbase_url = "{base_url}"\n{model_extra}',
        encoding="utf-8",
    )
    return path


def test_a_tasks_until_and_max_gen_toks_reach_the_request(tmp_path: Path) -> None:
    """The task's until, max_gen_toks and greedy decoding are what the client sends, what the
    fingerprint keys the cache by and what the provenance records."""
    from langchain_core.messages import HumanMessage

    from ape.tasks.models.build import build_model
    from ape.tasks.models.fingerprint import model_fingerprint
    from ape.tasks.models.requests import request_settings
    from ape.tasks.models.task_requests import overridden
    from tests.helpers.fake_openai import LoopbackEndpoint, completion

    server = LoopbackEndpoint(lambda request: (200, completion("42")))
    try:
        config = _load(_gsm8k_endpoint_config(tmp_path, server.base_url))
        model = config.model[0]
        build_model(model, config.base_dir).invoke([HumanMessage("2+2?")])
    finally:
        server.close()
    body = server.requests[-1].body
    assert body["stop"] == ["Question:", "\n\n"] and body["temperature"] == 0.0
    assert 64 in (body.get("max_tokens"), body.get("max_completion_tokens"))
    asked = request_settings(model)
    assert (asked.stop, asked.max_tokens, asked.temperature) == (["Question:", "\n\n"], 64, 0.0)
    assert overridden(model, {"stop": ["Question:", "\n\n"], "max_tokens": 64, "temperature": 0.0}) == []
    plain = ModelConfig(provider="openai", model="m", base_url=server.base_url, max_tokens=64, temperature=0.0)
    assert model_fingerprint(plain) != model_fingerprint(model)  # the stop sequences key the cache


def test_a_model_setting_wins_over_the_tasks_and_one_line_says_so(tmp_path: Path) -> None:
    from ape.tasks.models.requests import request_settings
    from ape.tasks.models.task_requests import overridden
    from ape.tasks.storage.lm_eval_tasks import generation_asks

    config = _load(_gsm8k_endpoint_config(tmp_path, "http://127.0.0.1:9/v1", "max_tokens = 16\n"))
    model = config.model[0]
    assert config.task is not None
    asks, _ = generation_asks(config.task, config.base_dir)
    asked = request_settings(model)
    assert asked.max_tokens == 16 and asked.stop == ["Question:", "\n\n"] and asked.temperature == 0.0
    lines = overridden(model, asks)
    assert len(lines) == 1 and "[model] max_tokens = 16 is sent, not the task's max_gen_toks" in lines[0]


def test_a_loglikelihood_task_is_one_continuation_scored_by_the_harness(tmp_path: Path) -> None:
    """LAMBADA: each document one item whose only choice is the harness's continuation, with no
    delimiter; the session's score is acc (the greedy match), perplexity is kept beside it."""
    from ape.tasks.checking.lm_eval_check import LmEvalChecker
    from ape.tasks.solving.choices import choice_texts

    write_lambada(tmp_path, test=3)
    config = _load(_config(tmp_path, 'lm_eval = "lambada_openai"\ndata_files = { test = "lambada/test.jsonl" }'))
    items = [LmEvalItem.model_validate_json(line) for line in config.data.file.read_text().splitlines()]
    assert [item.id for item in items] == [f"lambada_openai/{i}" for i in range(3)]
    assert items[0].context.endswith("He looked at the") and items[0].choices == [" door"] and items[0].gold == 0
    assert config.choices is not None and config.choices.delimiter == "" and config.choices.min_choices == 1
    assert choice_texts(items[0], config.choices) == [" door"]
    with pytest.raises(ValueError, match="needs two or more"):
        choice_texts(items[0], config.choices.model_copy(update={"min_choices": 2}))
    checker = LmEvalChecker(**config.checker.args)
    right = checker(items[0], {"loglikelihoods": [-2.5], "greedy": [True]})
    assert right.score == 1.0 and right.metadata["metric"] == "acc,none"
    assert right.metadata["lm_eval"] == {"perplexity,none": -2.5, "acc,none": 1.0}
    assert checker(items[0], {"loglikelihoods": [-2.5], "greedy": [False]}).score == 0.0
