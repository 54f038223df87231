"""Failing endpoints through the real command line: `ape run`, then `ape retry`.

A loopback HTTP server speaks OpenAI chat completions and decides per item (by
the question in the conversation's first user message) how to answer:

- item A (``i0``, "2 + 1"): 429 twice, then the right answer;
- item B (``i1``, "3 + 4"): 500 every time until the test marks it recovered;
- item C (``i2``, "4 + 7"): an answer without a number (PARSING_FAILED) until the
  test marks it fixed.

``ape run`` must end with exit code 1, every item saved once, A solved after its
retries and B recorded as an HTTP error; ``ape retry`` must then redo B alone,
and ``ape retry --outcomes PARSING_FAILED`` C alone (past the result cache), each
time keeping every item exactly once and rebuilding the report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_openai", reason="the retry CLI test needs the 'openai' extra")

from tests.helpers.fake_openai import LoopbackEndpoint, Reply, Request, completion, error_body  # noqa: E402
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark, read_results  # noqa: E402

QUESTION = re.compile(r"(\d+) \+ (\d+)")
A, B, C = "2 + 1", "3 + 4", "4 + 7"  # the questions of items i0, i1, i2 (see runner_helpers)

MODEL = """[model]
name = "flaky-endpoint"
provider = "openai"
model = "fake"
base_url = "{base_url}"
temperature = 0.0
max_retries = 3
retry_initial_s = 0.01
retry_max_s = 0.05
timeout_s = 10
"""


class ItemAwareEndpoint(LoopbackEndpoint):
    """An OpenAI-compatible endpoint whose answer depends on the item being asked about.

    ``asked`` counts chat-completion requests per question; ``recovered`` and
    ``fixed`` are the switches the test flips between runs.
    """

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.recovered = False  # item B stops failing
        self.fixed = False  # item C starts answering with a number
        self.rate_limited = 2  # item A's remaining 429s
        super().__init__(self.answer)

    def answer(self, request: Request) -> Reply:
        users = [m.get("content") for m in request.body.get("messages", []) if m.get("role") == "user"]
        found = QUESTION.search(str(users[0])) if users else None
        if found is None:
            return 400, error_body("no question in the first user message")
        question = found.group(0)
        with self.lock:
            self.asked[question] += 1
            if question == A and self.rate_limited > 0:
                self.rate_limited -= 1
                return 429, error_body("rate limited, slow down")
            if question == B and not self.recovered:
                return 500, error_body("the backend is down")
        if question == C and not self.fixed:
            return 200, completion("I am not sure.")
        return 200, completion(f"The answer is {int(found.group(1)) + int(found.group(2))}.")


@pytest.fixture
def endpoint() -> Iterator[ItemAwareEndpoint]:
    server = ItemAwareEndpoint()
    yield server
    server.close()


def ape(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess (PREFECT_API_URL comes from the environment)."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run(
        [sys.executable, "-m", "ape", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def by_item(out: Path) -> dict[str, dict[str, Any]]:
    """The saved batches by item id, asserting that no item is saved twice."""
    batches = read_results(out / "results.jsonl")
    ids = [b["item_id"] for b in batches]
    assert len(ids) == len(set(ids)), f"an item was saved twice: {sorted(ids)}"
    return {b["item_id"]: b for b in batches}


def outcomes(out: Path) -> dict[str, str]:
    return {key: b["sessions"][0]["outcome"] for key, b in by_item(out).items()}


def report_errors(out: Path) -> int:
    envelope = json.loads((out / "report.json").read_text())
    assert envelope["error"] is None
    (row,) = envelope["leaderboard"]
    assert row["n_items"] == 3
    return row["outcomes"]["ERROR"]


@pytest.mark.slow
def test_run_then_retry_recovers_failed_items(tmp_path: Path, prefect_server: str, endpoint: ItemAwareEndpoint) -> None:
    config = make_benchmark(tmp_path / "bench", n=3, models=MODEL.format(base_url=endpoint.base_url))
    out = tmp_path / "bench" / "out"

    # 1. the first run: A needs two retries, B keeps failing, C cannot be parsed
    first = ape("run", str(config), "--no-server", "--workers", "1")
    assert first.returncode == 1, f"{first.stdout}\n{first.stderr}"
    assert "ape retry" in first.stderr  # the message says how to redo the failed items
    assert outcomes(out) == {"i0": "SOLVED", "i1": "ERROR", "i2": "PARSING_FAILED"}
    rows = by_item(out)
    assert rows["i0"]["sessions"][0]["correct"] is True
    error = rows["i1"]["sessions"][0]["error"]
    # langchain-openai re-raises a 500 as its own subclass of openai.InternalServerError
    assert error["type"] in {"InternalServerError", "OpenAIAPIError"}, error
    assert "500" in error["message"] and "the backend is down" in error["message"], error
    assert endpoint.asked == {A: 3, B: 4, C: 2}  # 2 x 429 + 1; 1 + max_retries; 2 parse attempts
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["errored_ids"] == ["i1"] and sorted(meta["completed_ids"]) == ["i0", "i1", "i2"]
    transcripts = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    failed = next(t for t in transcripts if t["item_id"] == "i1")
    assert failed["outcome"] == "ERROR"
    assert any(e["kind"] == "MODEL_ERROR" and "500" in e["error"]["message"] for e in failed["entries"])
    assert report_errors(out) == 1  # the report is written even when items failed

    # 2. the endpoint recovers: `ape retry` redoes B alone
    endpoint.recovered = True
    second = ape("retry", str(out), "--no-server")
    assert second.returncode == 0, f"{second.stdout}\n{second.stderr}"
    assert outcomes(out) == {"i0": "SOLVED", "i1": "SOLVED", "i2": "PARSING_FAILED"}
    assert by_item(out)["i1"]["sessions"][0]["correct"] is True
    assert endpoint.asked == {A: 3, B: 5, C: 2}  # A and C were not asked again
    assert json.loads((out / "metadata.json").read_text())["errored_ids"] == []
    assert report_errors(out) == 0

    # 3. `--outcomes PARSING_FAILED` redoes C, past its cached unparsable answer
    endpoint.fixed = True
    third = ape("retry", str(out), "--outcomes", "PARSING_FAILED", "--no-server")
    assert third.returncode == 0, f"{third.stdout}\n{third.stderr}"
    assert outcomes(out) == {"i0": "SOLVED", "i1": "SOLVED", "i2": "SOLVED"}
    assert endpoint.asked == {A: 3, B: 5, C: 3}
    rows = by_item(out)
    assert all(b["sessions"][0]["correct"] for b in rows.values())
    assert not rows["i2"]["sessions"][0]["cached"]
    assert report_errors(out) == 0
    envelope = json.loads((out / "report.json").read_text())
    assert envelope["leaderboard"][0]["outcomes"] == {
        "SOLVED": 3,
        "PARSING_FAILED": 0,
        "GAVE_UP": 0,
        "TRUNCATED": 0,
        "ERROR": 0,
    }


def test_retry_rejects_an_unknown_outcome(tmp_path: Path) -> None:
    from ape.cli import main

    tmp_path.joinpath("out").mkdir()
    assert main(["retry", str(tmp_path / "out"), "--outcomes", "SOLVD", "--no-server"]) == 2


def test_retry_without_a_recorded_config_says_what_to_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ape.cli import main

    tmp_path.joinpath("out").mkdir()
    assert main(["retry", str(tmp_path / "out"), "--no-server"]) == 2
    assert "--config" in capsys.readouterr().err


def test_retry_of_one_models_folder_redoes_that_model_only(tmp_path: Path, prefect_server: str) -> None:
    from ape.cli import main

    models = "".join(
        f'[[model]]\nname = "{name}"\nprovider = "mock"\n'
        f'args = {{ behaviour = "arithmetic", seed = {seed}, call_log = "{tmp_path / name}.log" }}\n'
        for seed, name in enumerate(("alpha", "beta"))
    )  # different seeds: no shared cache entries
    config = make_benchmark(tmp_path / "bench", n=3, models=models)
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 0
    out = tmp_path / "bench" / "out"
    calls = {name: len((tmp_path / f"{name}.log").read_text().splitlines()) for name in ("alpha", "beta")}
    assert calls == {"alpha": 3, "beta": 3}

    assert main(["retry", str(out / "alpha"), "--outcomes", "SOLVED", "--no-server", "--no-progress"]) == 0
    after = {name: len((tmp_path / f"{name}.log").read_text().splitlines()) for name in ("alpha", "beta")}
    assert after == {"alpha": 6, "beta": 3}  # only alpha asked again
    assert not (out / "alpha" / "alpha").exists()
    assert sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")) == ["alpha", "beta"]
    envelope = json.loads((out / "report.json").read_text())
    assert {row["model_id"] for row in envelope["leaderboard"]} == {"alpha", "beta"}


def test_retry_of_a_run_folder_prints_that_runs_leaderboard(
    tmp_path: Path, prefect_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ape retry OUTPUT/latest`` continues that run, and what it prints is that run's
    leaderboard, not the one of the plain results beside ``runs/`` (an earlier flow run made
    the run folder, so this flow run's id does not find it)."""
    from ape.cli import main

    config = make_benchmark(tmp_path / "bench", n=4, model_args='behaviour = "arithmetic", accuracy = 0.0, seed = 1')
    out = tmp_path / "bench" / "out"
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 0  # plain results: all wrong
    config.write_text(config.read_text().replace("accuracy = 0.0", "accuracy = 1.0"))
    assert main(["run", str(config), "--new-run", "--no-server", "--no-progress"]) == 0  # a run: all right
    capsys.readouterr()

    assert main(["retry", str(out / "latest"), "--outcomes", "SOLVED", "--no-server", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| 1 ")]
    assert rows and "1.000" in rows[0] and "0.000 [" not in rows[0], printed
