"""A reasoning model through the real command line: ``ape run`` against a loopback
OpenAI-compatible endpoint that answers in every shape reasoning models use.

One item per shape: the ``reasoning_content`` field, the ``reasoning`` field, a
``<think>`` block, only ``</think>``, a block never closed, a budget spent thinking
(``finish_reason: "length"``, no answer) and an answer cut after its reasoning; and one
plain answer. The reasoning always holds a wrong first guess, and the adapter is ``strip``
with ``exact_match``, so any reasoning left in the answer fails the check.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.runner import make_benchmark, read_results

# what the endpoint spends reasoning, per item (i7 reports none)
SPENT = {"i0": 11, "i1": 13, "i2": 17, "i3": 19, "i4": 23, "i5": 29, "i6": 31}

MODEL = """[model]
name = "thinker"
provider = "openai"
model = "fake"
base_url = "{base_url}"
max_tokens = 64
max_retries = 0
timeout_s = 20
reasoning_effort = "low"
"""


def guess(answer: int) -> str:
    return f"first guess {answer + 1}, no wait"


def reply(item: str, answer: int) -> dict:
    from tests.helpers.fake_openai import completion

    spent = SPENT.get(item)
    thought = guess(answer)
    shapes = {
        "i0": lambda: completion(str(answer), fields={"reasoning_content": thought}, reasoning_tokens=spent),
        "i1": lambda: completion(str(answer), fields={"reasoning": thought}, reasoning_tokens=spent),
        "i2": lambda: completion(f"<think>{thought}</think>\n{answer}", reasoning_tokens=spent),
        "i3": lambda: completion(f"{thought}\n</think>\n\n{answer}", reasoning_tokens=spent),  # template opened it
        "i4": lambda: completion(f"<think>{thought}", reasoning_tokens=spent),  # never closed
        "i5": lambda: completion(  # the whole budget spent thinking
            "", fields={"reasoning_content": thought}, reasoning_tokens=spent, finish_reason="length"
        ),
        "i6": lambda: completion(  # an answer cut after its reasoning
            f"<think>{thought}</think>The answer is", reasoning_tokens=spent, finish_reason="length"
        ),
        "i7": lambda: completion(str(answer)),
    }
    return shapes[item]()


@pytest.fixture
def thinking_endpoint() -> Iterator:
    pytest.importorskip("langchain_openai", reason="the stub endpoint test needs the 'openai' extra")
    from tests.helpers.fake_openai import LoopbackEndpoint, Request

    def answer(request: Request) -> tuple[int, dict]:
        users = [m.get("content") for m in request.body.get("messages", []) if m.get("role") == "user"]
        found = re.search(r"(\d+) \+ (\d+)", str(users[0]))
        assert found is not None
        a, b = int(found.group(1)), int(found.group(2))
        index = a - 2  # make_benchmark asks item i: (i + 2) + (3i + 1)
        return 200, reply(f"i{index}", a + b)

    server = LoopbackEndpoint(answer)
    yield server
    server.close()


def test_ape_run_grades_the_answer_alone_and_keeps_the_reasoning_apart(
    tmp_path: Path, prefect_server: str, thinking_endpoint
) -> None:
    from ape.cli import main

    config = make_benchmark(tmp_path / "bench", n=8, models=MODEL.format(base_url=thinking_endpoint.base_url))
    config.write_text(config.read_text().replace('implementation = "last_number"', 'implementation = "strip"'))
    out = tmp_path / "bench" / "out"
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 0

    sessions = {b["item_id"]: b["sessions"][0] for b in read_results(out / "results.jsonl")}
    outcomes = {item: s["outcome"] for item, s in sessions.items()}
    assert outcomes == {
        **{item: "SOLVED" for item in ("i0", "i1", "i2", "i3", "i7")},
        **{item: "TRUNCATED" for item in ("i4", "i5", "i6")},
    }
    assert all(sessions[i]["correct"] for i in ("i0", "i1", "i2", "i3", "i7"))  # every right answer passes
    for session in sessions.values():  # no saved solution or answer holds reasoning
        assert "first guess" not in json.dumps([session["solution"], session["raw_output"]])
    assert {i: s["reasoning_cut"] for i, s in sessions.items() if s["outcome"] == "TRUNCATED"} == {
        "i4": True,
        "i5": True,
        "i6": False,
    }
    assert {i: s["reasoning_tokens"] for i, s in sessions.items()} == {**SPENT, "i7": None}

    transcripts = {t["item_id"]: t for t in map(json.loads, (out / "sessions.jsonl").read_text().splitlines())}
    for item in ("i0", "i1", "i2", "i3", "i4", "i5", "i6"):
        response = next(e for e in transcripts[item]["entries"] if e["kind"] == "MODEL_RESPONSE")
        assert response["data"]["reasoning"].startswith("first guess"), item
        assert "first guess" not in (response["content"] or "")
        assert response["data"]["usage"]["reasoning_tokens"] == SPENT[item]
    assert "reasoning" not in next(e for e in transcripts["i7"]["entries"] if e["kind"] == "MODEL_RESPONSE")["data"]

    envelope = json.loads((out / "report.json").read_text())
    (row,) = envelope["leaderboard"]
    assert row["outcomes"]["TRUNCATED"] == 3
    assert (row["truncated_reasoning"], row["truncated_answer"]) == (2, 1)
    assert row["total_reasoning_tokens"] == sum(SPENT.values())
    assert row["mean_reasoning_tokens"] == pytest.approx(sum(SPENT.values()) / len(SPENT))
    assert envelope["health"]["thinker"]["truncated_reasoning"] == 2
    text = (out / "leaderboard.md").read_text()
    assert "| Cut reasoning |" in text and "| Reasoning tokens |" in text
    assert "2 while still reasoning, before any answer" in text and "lower [model] reasoning_effort" in text

    assert len(thinking_endpoint.requests) == 8  # the cut replies got no reformat prompt
    assert all(r.body.get("reasoning_effort") == "low" for r in thinking_endpoint.requests)
    provenance = json.loads((out / "metadata.json").read_text())["provenance"]
    assert provenance["models"]["thinker"]["fingerprint"]["reasoning_effort"] == "low"
