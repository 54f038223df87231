"""Builds small benchmark folders (data, schema, config) for runner tests."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA = '''from pydantic import BaseModel

from ape import Failed, Passed


class Item(BaseModel):
    id: str
    question: str
    answer: int
    category: str = "easy"


def check_strict(item, solution):
    return Passed() if solution == item.answer else Failed(reason="wrong")


def check_always_fails(item, solution):
    return Failed(reason="strict grader")


SAVED = []


class CountingChecker:
    """Counts its instances: the run should make checker_workers of them (plus a probe)."""

    made = 0

    def __init__(self):
        type(self).made += 1

    def __call__(self, item, solution):
        return Passed() if solution == item.answer else Failed(reason="wrong")


def remember(batch):
    SAVED.append(batch.item_id)
'''


def make_benchmark(
    folder: Path,
    n: int = 6,
    *,
    model_args: str = 'behaviour = "arithmetic"',
    extra: str = "",
    checker: str = 'implementation = "exact_match"',
    template: str = "What is {{ question }}?",
    run: str = "",
    models: str | None = None,
    id_prefix: str = "i",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchschema.py").write_text(SCHEMA + FLAKY)
    with (folder / "data.jsonl").open("w") as handle:
        for i in range(n):
            a, b = i + 2, 3 * i + 1
            handle.write(
                json.dumps(
                    {
                        "id": f"{id_prefix}{i}",
                        "question": f"{a} + {b}",
                        "answer": a + b,
                        "category": "even" if i % 2 == 0 else "odd",
                    }
                )
                + "\n"
            )
    model = models or f'[model]\nname = "m"\nprovider = "mock"\nargs = {{ {model_args} }}\n'
    workers = "" if "solver_workers" in run else "solver_workers = 3\n"
    text = f'''name = "t"
[data]
file = "data.jsonl"
schema = "benchschema:Item"
category_field = "category"

[prompt]
template = "{template}"

{model}
[adapter]
implementation = "last_number"

[checker]
{checker}

[run]
{workers}output = "out"
{run}

[cli]
progress = false
{extra}
'''
    path = folder / "config.toml"
    path.write_text(text)
    return path


def read_results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


FLAKY = '''

import os
import re

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

CALLS = []


class Flaky(BaseChatModel):
    """Answers sums; fails (like a dropped connection) on prompts with fail_marker until heal_file exists."""

    fail_marker: str = "NEVER"
    heal_file: str = ""
    call_log: str = ""

    @property
    def _llm_type(self):
        return "flaky"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        text = messages[-1].content
        CALLS.append(text)
        if self.call_log:
            with open(self.call_log, "a") as handle:
                handle.write(text + "\\n")
        if self.fail_marker in text and not os.path.exists(self.heal_file):
            raise ConnectionError("endpoint down")
        m = re.search(r"(\\d+) \\+ (\\d+)", text)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"= {int(m[1]) + int(m[2])}"))])
'''


def plugin_module(config_path: Path, name: str = "benchschema"):
    """The plugin module ``name`` as the run loaded it: from the config's folder, under its
    private module name."""
    from ape.tasks.plugins.loader import import_plugin_module

    return import_plugin_module(name, Path(config_path).resolve().parent)
