"""Every fenced code block of README.md and docs/ is run or validated (tests/helpers/doc_blocks.py),
so a documented example can never drift from the code; and the checker itself catches drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import doc_blocks
from tests.helpers.doc_blocks import CHECKS, LANGUAGES, Block, all_blocks

BLOCKS = all_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_every_code_block_is_valid(block: Block):
    assert block.language in LANGUAGES, (
        f"{block.where}: give the block a language ({', '.join(sorted(LANGUAGES))}) so it can be checked"
    )
    check = CHECKS.get(block.language)
    if check is not None:
        check(block)


def test_the_docs_have_blocks_of_every_checked_kind():
    kinds = {block.language for block in BLOCKS}
    assert {"toml", "bash", "python", "json"} <= kinds
    assert len(BLOCKS) > 40


def _block(language: str, text: str) -> Block:
    return Block(Path(doc_blocks.REPO_ROOT / "docs" / "x.md"), 1, language, text)


@pytest.mark.parametrize(
    ("language", "text", "problem"),
    [
        ("toml", '[checker]\nimplmentation = "f1"\n', "Extra inputs"),
        ("toml", "[run]\nsolver_workers = 0\n", "greater than or equal"),
        ("toml", '[adapter]\nimplementation = "regex"\nargs = { patern = "x" }\n', "patern"),
        ("toml", '[checker]\nimplementation = "exact_match"\nargs = { feild = "answer" }\n', "feild"),
        ("toml", "[sandbx]\nx = 1\n", "not a config section"),
        ("bash", "ape valdate config.toml\n", "argument parser refused"),
        ("bash", "ape run config.toml --new-runs\n", "argument parser refused"),
        ("bash", "python -m ape examples/nowhere/config.toml\n", "does not exist"),
        ("bash", "pip install -e '.[nope]'\n", "no extra"),
        ("bash", "python benchmarks/speed.py --fastest\n", "no option"),
        ("bash", "rm -rf output\n", "not a program"),
        ("python", "import ape\n\nclass X(ape.DataModle):\n    pass\n", "does not exist"),
        ("python", "from ape import Pased\n", "does not export"),
        ("python", "import ape\n\nclass X(ape.DataModel):\n    id: str = 1 +\n", "invalid syntax"),
        ("python", "def f():\n    return 1\n\nraise_here = 1 / 0\n", "division by zero"),
        ("json", '{"id": 1,}\n', "not JSON"),
    ],
)
def test_the_checks_catch_a_drifted_example(language, text, problem):
    with pytest.raises((AssertionError, SyntaxError, ZeroDivisionError)) as caught:
        CHECKS[language](_block(language, text))
    assert problem in str(caught.value)


def test_shell_lines_are_split_into_commands():
    text = "pip install -e '.[dev]' && python -m ape examples/arithmetic/config.toml   # run it\neval \"$(ape server env)\"\n"
    assert list(doc_blocks.commands(text)) == [
        ["pip", "install", "-e", ".[dev]"],
        ["python", "-m", "ape", "examples/arithmetic/config.toml"],
        ["ape", "server", "env"],
        ["eval", "$(ape server env)"],
    ]
