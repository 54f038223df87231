"""Answers cut at the token limit through the real command line.

1. ``ape run`` with a mock model that cuts answers longer than ``[model] max_tokens``: the
   cut items end TRUNCATED (the stop reason in results.jsonl and sessions.jsonl), counted
   in report.json, leaderboard.md and leaderboard.parquet, with the run-health line; then,
   with ``max_tokens`` raised in the config, ``ape retry --outcomes truncated`` asks the
   model again about those items only, and they are solved.
2. langchain-openai's ChatOpenAI against a loopback OpenAI-compatible server that answers
   one item with ``finish_reason: "length"``: that item ends TRUNCATED, the others SOLVED.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.runner import make_benchmark, read_results

# answers by item (the data of make_benchmark: i0 asks 2 + 1, i1 3 + 4, i2 4 + 7, i3 5 + 10)
LONG = "Let me add the two numbers carefully, one digit at a time, before I answer. The answer is"
RESPONSES = {"i0": "The answer is 3", "i1": f"{LONG} 7", "i2": "The answer is 11", "i3": f"{LONG} 15"}


def scripted_model(call_log: Path, max_tokens: int) -> str:
    table = ", ".join(f'{key} = "{text}"' for key, text in RESPONSES.items())
    return (
        f'[model]\nname = "tight"\nprovider = "mock"\nmax_tokens = {max_tokens}\n'
        f'args = {{ behaviour = "scripted", call_log = "{call_log}", responses = {{ {table} }} }}\n'
    )


def asked(call_log: Path) -> Counter[str]:
    """Model calls per question, from the mock's call log."""
    found = Counter()
    for line in call_log.read_text().splitlines():
        match = re.search(r"\d+ \+ \d+", json.loads(line)["human"])
        found[match.group(0) if match else "?"] += 1
    return found


def outcomes(out: Path) -> dict[str, str]:
    return {b["item_id"]: b["sessions"][0]["outcome"] for b in read_results(out / "results.jsonl")}


def test_ape_run_counts_cut_answers_apart_and_retry_redoes_only_them(
    tmp_path: Path, prefect_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ape.cli import main

    calls = tmp_path / "calls.jsonl"
    config = make_benchmark(tmp_path / "bench", n=4, models=scripted_model(calls, max_tokens=8))
    out = tmp_path / "bench" / "out"
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 0  # a budget is no failure
    printed = capsys.readouterr()

    assert outcomes(out) == {"i0": "SOLVED", "i1": "TRUNCATED", "i2": "SOLVED", "i3": "TRUNCATED"}
    sessions = {b["item_id"]: b["sessions"][0] for b in read_results(out / "results.jsonl")}
    assert sessions["i1"]["stop_reason"] == "length" and sessions["i0"]["stop_reason"] == "stop"
    assert sessions["i1"]["score"] == 0.0 and sessions["i1"]["correct"] is False and sessions["i1"]["check"] is None
    assert sessions["i1"]["raw_output"] == " ".join(RESPONSES["i1"].split()[:8])
    transcripts = {t["item_id"]: t for t in map(json.loads, (out / "sessions.jsonl").read_text().splitlines())}
    cut = transcripts["i1"]
    assert cut["outcome"] == "TRUNCATED" and cut["stop_reason"] == "length"
    kinds = [e["kind"] for e in cut["entries"]]
    assert "TRUNCATED" in kinds and "PARSE_ATTEMPT" not in kinds
    response = next(e for e in cut["entries"] if e["kind"] == "MODEL_RESPONSE")
    assert response["data"]["stop_reason"] == "length"
    assert "outcome=TRUNCATED" in (out / "sessions.log").read_text()

    envelope = json.loads((out / "report.json").read_text())
    (row,) = envelope["leaderboard"]
    assert row["outcomes"] == {"SOLVED": 2, "PARSING_FAILED": 0, "GAVE_UP": 0, "TRUNCATED": 2, "ERROR": 0}
    assert row["pass_rate"] == 0.5
    assert envelope["health"]["tight"]["truncating"] is True
    board = pq.read_table(out / "leaderboard.parquet").to_pandas()
    assert board["truncated"].tolist() == [2]
    text = (out / "leaderboard.md").read_text()
    assert "| Truncated |" in text
    line = "answers of model `tight` were cut at the token limit in 2 of 4 sessions (50%"
    assert f"**Run health:** {line}" in text and "raise [model] max_tokens" in text
    assert "cut at the token limit in 2 of 4 sessions" in printed.out + printed.err  # the terminal says so too
    assert asked(calls) == {"2 + 1": 1, "3 + 4": 1, "4 + 7": 1, "5 + 10": 1}

    # a larger budget: the finished answers stay, the cut ones are asked again
    config.write_text(config.read_text().replace("max_tokens = 8", "max_tokens = 64"))
    assert main(["retry", str(out), "--outcome", "truncated", "--no-server", "--no-progress"]) == 0
    assert outcomes(out) == {"i0": "SOLVED", "i1": "SOLVED", "i2": "SOLVED", "i3": "SOLVED"}
    assert asked(calls) == {"2 + 1": 1, "3 + 4": 2, "4 + 7": 1, "5 + 10": 2}
    envelope = json.loads((out / "report.json").read_text())
    assert envelope["leaderboard"][0]["outcomes"]["TRUNCATED"] == 0 and envelope["leaderboard"][0]["pass_rate"] == 1.0
    assert "Truncated" not in (out / "leaderboard.md").read_text()


OPENAI_MODEL = """[model]
name = "stub"
provider = "openai"
model = "fake"
base_url = "{base_url}"
temperature = 0.0
max_tokens = 16
max_retries = 0
timeout_s = 10
"""


@pytest.fixture
def cutting_endpoint() -> Iterator:
    pytest.importorskip("langchain_openai", reason="the stub endpoint test needs the 'openai' extra")
    from tests.helpers.fake_openai import LoopbackEndpoint, Request, completion

    def answer(request: Request) -> tuple[int, dict]:
        users = [m.get("content") for m in request.body.get("messages", []) if m.get("role") == "user"]
        found = re.search(r"(\d+) \+ (\d+)", str(users[0]))
        assert found is not None
        if found.group(0) == "3 + 4":  # a reasoning model's budget spent before the answer
            return 200, completion("Let me think about", finish_reason="length")
        return 200, completion(f"The answer is {int(found.group(1)) + int(found.group(2))}")

    server = LoopbackEndpoint(answer)
    yield server
    server.close()


def test_chat_openai_finish_reason_length_ends_truncated(tmp_path: Path, prefect_server: str, cutting_endpoint) -> None:
    from ape.cli import main

    config = make_benchmark(tmp_path / "bench", n=3, models=OPENAI_MODEL.format(base_url=cutting_endpoint.base_url))
    out = tmp_path / "bench" / "out"
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 0
    assert outcomes(out) == {"i0": "SOLVED", "i1": "TRUNCATED", "i2": "SOLVED"}
    sessions = {b["item_id"]: b["sessions"][0] for b in read_results(out / "results.jsonl")}
    assert sessions["i1"]["stop_reason"] == "length" and sessions["i0"]["stop_reason"] == "stop"
    assert len(cutting_endpoint.requests) == 3  # the cut answer got no reformat prompt
    assert all(
        r.body.get("max_tokens") == 16 or r.body.get("max_completion_tokens") == 16 for r in cutting_endpoint.requests
    )
    envelope = json.loads((out / "report.json").read_text())
    assert envelope["leaderboard"][0]["outcomes"]["TRUNCATED"] == 1
    assert pq.read_table(out / "leaderboard.parquet").to_pandas()["truncated"].tolist() == [1]


def test_the_history_says_when_a_regression_came_with_more_truncations(tmp_path: Path, prefect_server: str) -> None:
    """Two `ape run --new-run`: the second with a `max_tokens` too small for the answers. The
    history verdict is a regression, and its note (report.json, the history table) says the
    truncations moved, so nobody reads the budget as lost ability."""
    from ape.cli import main

    model = '[model]\nname = "m"\nprovider = "mock"\nargs = { behaviour = "arithmetic", use_tools = false }\n'
    config = make_benchmark(tmp_path / "bench", n=20, models=model)
    command = ["run", str(config), "--new-run", "--no-server", "--no-progress"]
    assert main(command) == 0
    config.write_text(config.read_text().replace('provider = "mock"\n', 'provider = "mock"\nmax_tokens = 3\n'))
    assert main(command) == 0
    top = tmp_path / "bench" / "out"
    report = json.loads((top / "latest" / "report.json").read_text())
    assert report["leaderboard"][0]["outcomes"]["TRUNCATED"] == 20
    (verdict,) = report["regressions"]
    assert verdict["verdict"] == "regressed"
    assert (verdict["truncated_share"], verdict["reference_truncated_share"]) == (1.0, 0.0)
    assert "truncations moved from 0% to 100% of sessions" in verdict["note"]
    assert "token budget, not ability" in (top / "latest" / "leaderboard.md").read_text()
    runs = pq.read_table(top / "history" / "runs.parquet").to_pandas()
    assert runs["truncated"].tolist() == [0, 20]
    assert "truncations moved" in runs["history_note"].iloc[1]
