"""The judge is resolved once per run: preflight reads ``[checker] args``, the judge's model
and the rubric file once, and hands that :class:`JudgeSpec` to every part that needs it (the
checker factory of each model, the resume fingerprint, the calibration check, the canary)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ape.config import load_config
from ape.flows import preflight as preflight_module
from ape.tasks.checking import judge as judge_module
from ape.tasks.setup.model import resume_fingerprints
from tests.helpers.runner import make_benchmark

TWO_MODELS = "".join(
    f'[[model]]\nname = "{name}"\nprovider = "mock"\nargs = {{ behaviour = "arithmetic" }}\n' for name in ("a", "b")
)


def judged(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rubric.mustache").write_text(
        "Q: {{ question }} <reference>{{ answer }}</reference> <solution>{{ solution }}</solution>"
    )
    rows = [
        {"id": "c1", "question": "1 + 1", "answer": 2, "solution": "2", "human": "PASS"},
        {"id": "c2", "question": "1 + 2", "answer": 3, "solution": "4", "human": "FAIL"},
    ]
    (folder / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    checker = (
        'implementation = "judge"\n'
        'args = { rubric_file = "rubric.mustache", calibration_file = "labels.jsonl" }\n'
        '[checker.judge]\nname = "judge"\nprovider = "mock"\nmax_retries = 0\nargs = { behaviour = "grader" }\n'
    )
    return make_benchmark(folder, n=3, checker=checker, models=TWO_MODELS, run="cache = true")


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts what resolving the judge does: its arguments parsed, its model looked up, its rubric read."""
    counted: Counter[str] = Counter()
    for name in ("parse_args", "judge_model_config", "read_rubric"):
        real = getattr(judge_module, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            counted[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(judge_module, name, spy)
    return counted


def test_preflight_the_canary_and_the_fingerprints_resolve_the_judge_once(
    tmp_path: Path, resolved: Counter[str]
) -> None:
    config = load_config(judged(tmp_path))
    checked = preflight_module.preflight(config)
    graded = preflight_module.graded_canary(config, checked)
    assert graded is not None and graded.graded  # the judge canary's six and no more resolving
    for setup in checked.setups:
        resume_fingerprints(setup)
        moved = config.model_copy(update={"run": config.run.model_copy(update={"output": tmp_path / "runs" / "r1"})})
        setup.for_run(moved).checker_factory()  # a run folder: the judge's cache moves, the judge does not
    assert resolved == {"parse_args": 1, "judge_model_config": 1, "read_rubric": 1}
    assert checked.judge is not None and all(setup.judge is checked.judge for setup in checked.setups)
    assert graded.graded is not None and len(graded.graded) == 6


def test_the_spec_fingerprint_is_the_checkers_and_the_calibration_files(tmp_path: Path) -> None:
    config = load_config(judged(tmp_path))
    spec = judge_module.resolve_judge(config)
    assert spec.calibration_file == tmp_path / "labels.jsonl"
    assert spec.rubric.startswith("Q: {{ question }}") and spec.own_model
    assert judge_module.judge_fingerprint(config) == spec.fingerprint  # resolving again gives the same judge
    checker = preflight_module.preflight(config).setups[0].checker_factory()
    assert checker.fingerprint == spec.fingerprint


def test_a_served_judge_keeps_its_fingerprint_and_takes_the_servers_endpoint(tmp_path: Path) -> None:
    config = load_config(judged(tmp_path))
    spec = judge_module.resolve_judge(config)
    assert (
        spec.at_local_servers({}) is spec and spec.at_local_servers({"a": "http://127.0.0.1:9/v1"}) is spec
    )  # not the judge's
    served = spec.at_local_servers({"judge": "http://127.0.0.1:9/v1"})
    assert served.model_cfg.base_url == "http://127.0.0.1:9/v1" and served.fingerprint == spec.fingerprint
    assert spec.model_cfg.base_url is None
