"""The ``choice`` checker of ``[choices]`` runs has known answers too, and ``ape validate`` says
what its canary graded.

Before, ``ape validate`` on a ``[choices]`` config said "canary: none (a user checker declares
its known answers in [[checker.canary]])" although the checker is the built-in ``choice``.
"""

from __future__ import annotations

import shutil

import pytest
from pydantic import BaseModel

from ape.cli import main
from ape.cli.validate import canary_summary
from ape.schemas.choices import ChoicesConfig
from ape.schemas.config import CheckerConfig
from ape.schemas.results import CheckStatus
from ape.tasks.checking.canary import CanaryFailed, run_canary
from ape.tasks.checking.choice import ChoiceChecker
from ape.tasks.storage.config_file import load_config
from tests.helpers.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "multiple_choice"


class Item(BaseModel):
    id: str


def graded(choices: ChoicesConfig, checker: type[ChoiceChecker] = ChoiceChecker):
    return run_canary(CheckerConfig(implementation="choice"), lambda: checker(choices), Item)


@pytest.mark.parametrize(
    "choices",
    [
        ChoicesConfig(field="choices", gold="answer"),
        ChoicesConfig(field="choices", gold="answer", gold_is="letter", metric="acc"),
        ChoicesConfig(field="options", gold="gold", gold_is="text"),
        ChoicesConfig(fields=["A", "B", "C", "D"], gold="answer", continuation="letter"),
    ],
    ids=["index", "letter", "text", "fields"],
)
def test_the_choice_checker_grades_a_known_pick_and_a_known_miss(choices):
    verdicts = [(result.status, result.score) for _, result in graded(choices)]
    assert verdicts == [(CheckStatus.PASSED, 1.0), (CheckStatus.FAILED, 0.0)]


def test_a_choice_checker_that_ignores_the_log_likelihoods_is_refused():
    class AlwaysRight(ChoiceChecker):
        def __call__(self, item, solution):
            return super().__call__(item, {**solution, "loglikelihoods": [0.0] + [-9.0] * 3})

    with pytest.raises(CanaryFailed, match="known pick of another choice': expected FAILED"):
        graded(ChoicesConfig(fields=["A", "B", "C", "D"], gold="answer"), AlwaysRight)


def test_validate_of_the_multiple_choice_example_says_what_its_canary_graded(tmp_path, capsys):
    folder = tmp_path / "mc"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("output"))
    assert main(["validate", str(folder / "config.toml")]) == 0
    out = capsys.readouterr().out
    assert "canary: 2 known answers graded as expected; no endpoint to probe" in out
    assert "user checker" not in out


def test_the_summary_names_the_endpoints_whose_log_probabilities_were_probed(tmp_path):
    folder = tmp_path / "mc"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("output"))
    config = folder / "config.toml"
    text = config.read_text().replace(
        'name = "mock-guesses"\nprovider = "mock"\nargs = { accuracy = 0.3, seed = 2 }',
        'name = "served"\nprovider = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:4501/v1"',
    )
    config.write_text(text)
    summary = canary_summary(load_config(config), graded=[object(), object()])
    assert summary == "2 known answers graded as expected; prompt log-probabilities of served echoed right"
