"""Batch clients, the batcher and the batch chat model against the loopback stub of both APIs.

No ``langchain-anthropic`` is needed: the Anthropic client is tested on its own, and the
reply of a batch model backed by Anthropic is read by :func:`anthropic_result`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.batch.batcher import Batcher, BatchRequestError, BatchSettings, custom_id
from ape.tasks.models.batch.chat import anthropic_result
from ape.tasks.models.batch.clients import AnthropicBatchClient
from ape.tasks.models.build import build_model
from ape.tasks.stats.cost import session_cost
from tests.helpers.batch_stub import BatchStub


@pytest.fixture
def stub() -> Iterator[BatchStub]:
    server = BatchStub(
        delay_s=0.2,
        fail=lambda text: "overloaded prompt" if "9 + 9" in text else None,
        expire=lambda text: "8 + 8" in text,
    )
    yield server
    server.close()


def _ask(question: str) -> dict:
    return {"model": "stub", "max_tokens": 32, "messages": [{"role": "user", "content": f"What is {question}?"}]}


def _wait(client: AnthropicBatchClient, batch_id: str) -> None:
    deadline = time.monotonic() + 10
    while not client.poll(batch_id).ended:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_anthropic_client_submits_polls_and_reads_every_kind_of_result(stub: BatchStub) -> None:
    client = AnthropicBatchClient(api_key="test-key", base_url=stub.root_url)
    batch_id = client.submit([("a", _ask("1 + 2")), ("b", _ask("9 + 9")), ("c", _ask("8 + 8"))], "t")
    first = client.poll(batch_id)
    assert (first.status, first.ended, first.counts["processing"]) == ("in_progress", False, 3)
    _wait(client, batch_id)
    assert client.poll(batch_id).counts == {"processing": 0, "succeeded": 1, "errored": 1, "canceled": 0, "expired": 1}
    results = client.results(batch_id)
    reply = anthropic_result(results["a"].body or {}).generations[0].message
    assert reply.text == "The answer is 3." and reply.usage_metadata["input_tokens"] == 12  # type: ignore[index]
    assert results["b"].error == "invalid_request_error: overloaded prompt"
    assert results["c"].expired and results["c"].body is None
    assert stub.submissions == 1


def test_anthropic_client_without_a_key_is_refused(stub: BatchStub) -> None:
    client = AnthropicBatchClient(api_key="", base_url=stub.root_url)
    with pytest.raises(Exception, match="401"):
        client.submit([("a", _ask("1 + 2"))], "t")


def test_anthropic_reply_keeps_tool_calls() -> None:
    message = {
        "content": [
            {"type": "text", "text": "Let me compute."},
            {"type": "tool_use", "id": "tu_1", "name": "calculator", "input": {"expression": "2+2"}},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4},
        "stop_reason": "tool_use",
    }
    reply = anthropic_result(message).generations[0].message
    assert reply.tool_calls[0]["name"] == "calculator" and reply.tool_calls[0]["args"] == {"expression": "2+2"}  # type: ignore[attr-defined]


def _openai_batcher(stub: BatchStub, folder: Path, model_id: str = "m", **settings: float) -> Batcher:
    import openai

    from ape.tasks.models.batch.clients import OpenAIBatchClient

    client = OpenAIBatchClient(openai.OpenAI(api_key="k", base_url=stub.base_url, max_retries=0))
    return Batcher(model_id, folder, client, BatchSettings(**{"size": 10, "wait_s": 0.1, "poll_s": 0.05, **settings}))


def _ask_all(batcher: Batcher, questions: list[str]) -> dict[str, object]:
    answers: dict[str, object] = {}

    def one(question: str) -> None:
        body = _ask(question)
        try:
            answers[question] = batcher.ask(custom_id(body, (question, 0)), body)
        except BatchRequestError as exc:
            answers[question] = exc

    threads = [threading.Thread(target=one, args=(q,)) for q in questions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


def test_batcher_gathers_by_size_and_hands_back_answers_and_errors(stub: BatchStub, tmp_path: Path) -> None:
    batcher = _openai_batcher(stub, tmp_path, size=2, wait_s=0.5)
    answers = _ask_all(batcher, ["1 + 2", "2 + 2", "9 + 9", "8 + 8", "3 + 3"])
    assert (stub.submissions, stub.requests) == (3, 5)  # 2 + 2 + 1 after the wait window
    text = {q: a["choices"][0]["message"]["content"] for q, a in answers.items() if isinstance(a, dict)}
    assert text == {"1 + 2": "The answer is 3.", "2 + 2": "The answer is 4.", "3 + 3": "The answer is 6."}
    assert "overloaded prompt" in str(answers["9 + 9"])
    assert "batch_expired" in str(answers["8 + 8"]) and "ape retry" in str(answers["8 + 8"])


def test_a_new_batcher_collects_batches_in_flight_and_answers_from_the_ledger(stub: BatchStub, tmp_path: Path) -> None:
    stub.delay_s = 3600.0
    first = _openai_batcher(stub, tmp_path, poll_s=3600.0)  # it never looks again, as if dead
    body = _ask("1 + 2")
    cid = custom_id(body, ("i0", 0))
    threading.Thread(target=first.ask, args=(cid, body), daemon=True).start()  # a worker that will die waiting
    deadline = time.monotonic() + 10
    while stub.submissions == 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.1)  # the ledger line is written right after the submit returns

    stub.delay_s = 0.0  # "the process died; the provider finished meanwhile"
    second = _openai_batcher(stub, tmp_path)
    assert second.ask(cid, body)["choices"][0]["message"]["content"] == "The answer is 3."
    assert stub.submissions == 1
    third = _openai_batcher(stub, tmp_path)  # after it ended: answered from batch_results.jsonl
    assert third.ask(cid, body)["choices"][0]["message"]["content"] == "The answer is 3."
    assert stub.submissions == 1 and third.submissions == 0


def test_custom_id_is_stable_per_session_and_request() -> None:
    body = _ask("1 + 2")
    assert custom_id(body, ("i0", 0)) == custom_id(dict(body), ("i0", 0))
    assert custom_id(body, ("i0", 0)) != custom_id(body, ("i0", 1))  # runs_per_data: separate samples
    assert custom_id(body, ("i0", 0)) != custom_id(_ask("1 + 3"), ("i0", 0))
    assert len(custom_id(body, None)) <= 64


def test_batch_price_factor_applies_to_batch_models_only() -> None:
    plain = ModelConfig(provider="openai", model="x", price_input_per_mtok=2.0, price_output_per_mtok=4.0)
    batched = plain.model_copy(update={"batch": True})
    assert session_cost(plain, 1_000_000, 1_000_000) == pytest.approx(6.0)
    assert session_cost(batched, 1_000_000, 1_000_000) == pytest.approx(3.0)
    custom = plain.model_copy(update={"batch": True, "batch_price_factor": 0.25})
    assert session_cost(custom, 1_000_000, 1_000_000) == pytest.approx(1.5)


def test_batch_on_a_model_without_a_batch_api_names_the_key(tmp_path: Path) -> None:
    cfg = ModelConfig(provider="mock", batch=True)
    with pytest.raises(ApeError) as caught:
        build_model(cfg, tmp_path)
    assert "batch" in str(caught.value.where) and "openai" in str(caught.value.hint)


def test_batch_model_answers_through_the_stub(stub: BatchStub, tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage

    cfg = ModelConfig(
        provider="openai", model="stub", base_url=stub.base_url, batch=True, batch_wait_s=0.0, batch_poll_s=0.05
    )
    model = build_model(cfg, tmp_path, batch_dir=tmp_path / "out")
    reply = model.invoke([HumanMessage("What is 20 + 22?")])
    assert reply.text == "The answer is 42." and reply.response_metadata["batch"] is True
    assert reply.usage_metadata["output_tokens"] == 5  # type: ignore[index]
    assert (stub.submissions, stub.chat_calls) == (1, 0)
    assert (tmp_path / "out" / "batches.jsonl").exists()


def test_a_failed_batch_request_is_not_retried_within_the_run() -> None:
    """Each retry would be another batch round (hours); ``ape retry`` redoes the item instead."""
    from ape.tasks.models.limits.policy import classify_error

    assert classify_error(BatchRequestError("batch b1: HTTP 429: overloaded, rate limit")) == "permanent"


# -- the window between the provider's accept and the ledger's fsync ------------------------------


def _intent(folder: Path, provider: str, cids: list[str], tag: str, bodies: list[dict] | None = None) -> None:
    """The ``submitting`` line a killed process wrote before its submit (and nothing after)."""
    import json
    from datetime import UTC, datetime

    from ape.tasks.models.batch.trust import request_hash

    line = {"event": "submitting", "tag": tag, "provider": provider, "custom_ids": sorted(cids)}
    line["requests"] = {cid: request_hash(body) for cid, body in zip(cids, bodies or [], strict=False)}
    line["at"] = datetime.now(UTC).isoformat()
    with open(folder / "batches.jsonl", "a") as handle:
        handle.write(json.dumps(line) + "\n")


def _events(folder: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (folder / "batches.jsonl").read_text().splitlines()]


def _anthropic_batcher(stub: BatchStub, folder: Path) -> Batcher:
    client = AnthropicBatchClient(api_key="k", base_url=stub.root_url)
    return Batcher("m", folder, client, BatchSettings(size=10, wait_s=0.1, poll_s=0.05))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_accepted_but_not_recorded_is_adopted_not_sent_again(
    stub: BatchStub, tmp_path: Path, provider: str
) -> None:
    from ape.tasks.models.batch.clients import OpenAIBatchClient

    bodies = {q: _ask(q) for q in ("1 + 2", "2 + 3")}
    cids = {q: custom_id(body, (q, 0)) for q, body in bodies.items()}
    if provider == "openai":
        import openai

        client: object = OpenAIBatchClient(openai.OpenAI(api_key="k", base_url=stub.base_url, max_retries=0))
    else:
        client = AnthropicBatchClient(api_key="k", base_url=stub.root_url)
    _intent(tmp_path, provider, list(cids.values()), "ape-dead", list(bodies.values()))
    accepted = client.submit([(cids[q], bodies[q]) for q in bodies], "ape-dead")  # type: ignore[attr-defined]
    if provider == "anthropic":  # another batch of another size, the same minute: not taken for it
        client.submit([("other", _ask("5 + 5"))], "ape-other")  # type: ignore[attr-defined]
    before = stub.submissions

    batcher = _openai_batcher(stub, tmp_path) if provider == "openai" else _anthropic_batcher(stub, tmp_path)
    answers = _ask_all(batcher, list(bodies))
    assert stub.submissions == before and batcher.submissions == 0  # nothing paid twice
    assert stub.lists == 1
    if provider == "openai":
        texts = {q: a["choices"][0]["message"]["content"] for q, a in answers.items()}  # type: ignore[index]
    else:
        texts = {q: a["content"][0]["text"] for q, a in answers.items()}  # type: ignore[index]
    assert texts == {"1 + 2": "The answer is 3.", "2 + 3": "The answer is 5."}  # answered by the adopted batch
    adopted = [e for e in _events(tmp_path) if e["event"] == "submitted"]
    assert [(e["batch_id"], e["tag"], e.get("adopted")) for e in adopted] == [(accepted, "ape-dead", True)]


def test_a_submit_that_made_no_batch_is_closed_and_its_requests_go_again(stub: BatchStub, tmp_path: Path) -> None:
    body = _ask("1 + 2")
    cid = custom_id(body, ("i0", 0))
    _intent(tmp_path, "openai", [cid], "ape-never-sent")
    batcher = _openai_batcher(stub, tmp_path)
    assert batcher.ask(cid, body)["choices"][0]["message"]["content"] == "The answer is 3."
    assert stub.submissions == 1
    events = [(e["event"], e.get("tag")) for e in _events(tmp_path)]
    assert events[:2] == [("submitting", "ape-never-sent"), ("unsent", "ape-never-sent")]
    assert [e for e, _ in events[2:]] == ["submitting", "submitted", "ended"]
    _openai_batcher(stub, tmp_path)  # a closed intent is not looked for again
    assert stub.lists == 1


def test_anthropic_find_refuses_an_ambiguous_listing(stub: BatchStub) -> None:
    client = AnthropicBatchClient(api_key="k", base_url=stub.root_url)
    first = client.submit([("a", _ask("1 + 2"))], "t1")
    second = client.submit([("b", _ask("1 + 3"))], "t2")
    now = time.time()
    assert client.find("t1", 1, now, known=set()) is None  # two of that size: cannot tell which
    assert client.find("t1", 1, now, known={second}) == first
    assert client.find("t1", 1, now - 3600, known=set()) is None  # outside the window


def test_a_live_process_submit_is_left_to_it(stub: BatchStub, tmp_path: Path) -> None:
    """Another Dask worker's process, alive, wrote the intent and is submitting: a batcher
    starting now must neither adopt nor close it (it would close a submit about to succeed)."""
    import json
    import os

    from ape.tasks.models.batch.batcher import _owner

    _intent(tmp_path, "openai", ["x"], "ape-live")
    rows = _events(tmp_path)
    rows[0]["owner"] = _owner(os.getpid())
    (tmp_path / "batches.jsonl").write_text(json.dumps(rows[0]) + "\n")
    _openai_batcher(stub, tmp_path)
    assert stub.lists == 0 and [e["event"] for e in _events(tmp_path)] == ["submitting"]
    rows[0]["owner"] = "999999999 1"  # gone: looked for, found nowhere, closed
    (tmp_path / "batches.jsonl").write_text(json.dumps(rows[0]) + "\n")
    _openai_batcher(stub, tmp_path)
    assert stub.lists == 1 and [e["event"] for e in _events(tmp_path)] == ["submitting", "unsent"]


# -- what a resumed batcher takes from the folder's files ------------------------------------------


def _plant(folder: Path, name: str, rows: list[dict]) -> None:
    import json

    with open(folder / name, "a") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def _planted_answer(cid: str, batch_id: str, body: dict | None = None) -> dict:
    from tests.helpers.batch_stub import _openai_completion

    row = {"custom_id": cid, "batch_id": batch_id, "body": _openai_completion("The answer is 999.")}
    if body is not None:
        from ape.tasks.models.batch.trust import request_hash

        row["request_hash"] = request_hash(body)
    return row


def test_planted_answer_rows_are_refused_and_the_requests_asked_again(stub: BatchStub, tmp_path: Path) -> None:
    """Rows for a batch the ledger never submitted, and rows without a request hash, are not
    the model's answers: each request goes to the provider, the refusals are counted."""
    questions = ["1 + 2", "2 + 3", "3 + 4", "4 + 5"]
    bodies = {q: _ask(q) for q in questions}
    cids = {q: custom_id(bodies[q], (q, 0)) for q in questions}
    ledger = {"event": "submitted", "batch_id": "batch_own", "tag": "t", "provider": "openai"}
    _plant(tmp_path, "batches.jsonl", [{**ledger, "custom_ids": [cids["4 + 5"]]}, {**ledger, "event": "ended"}])
    _plant(
        tmp_path,
        "batch_results.jsonl",
        [_planted_answer(cids[q], "batch_elsewhere", bodies[q]) for q in questions[:3]]  # not in the ledger
        + [_planted_answer(cids["4 + 5"], "batch_own")],  # in the ledger, but no request hash
    )
    batcher = _openai_batcher(stub, tmp_path, model_id="planted")  # a board of its own
    answers = _ask_all(batcher, questions)
    texts = {q: a["choices"][0]["message"]["content"] for q, a in answers.items()}  # type: ignore[index]
    assert texts == {
        "1 + 2": "The answer is 3.",
        "2 + 3": "The answer is 5.",
        "3 + 4": "The answer is 7.",
        "4 + 5": "The answer is 9.",
    }
    assert (stub.submissions, stub.requests) == (1, 4)
    assert batcher.refused == 4
    from ape.tasks.models.batch.status import take_refused

    assert take_refused("planted") == 4 and take_refused("planted") == 0  # the run's summary takes the count once


def test_an_answer_row_for_another_request_body_is_refused_when_asked(stub: BatchStub, tmp_path: Path) -> None:
    body = _ask("1 + 2")
    cid = custom_id(body, ("i0", 0))
    from ape.tasks.models.batch.trust import request_hash

    line = {"event": "submitted", "batch_id": "b1", "tag": "t", "provider": "openai", "custom_ids": [cid]}
    line["requests"] = {cid: request_hash(_ask("5 + 5"))}  # the ledger and the row agree with each other
    _plant(tmp_path, "batches.jsonl", [line, {"event": "ended", "batch_id": "b1"}])
    _plant(tmp_path, "batch_results.jsonl", [_planted_answer(cid, "b1", _ask("5 + 5"))])
    batcher = _openai_batcher(stub, tmp_path)
    assert batcher.ask(cid, body)["choices"][0]["message"]["content"] == "The answer is 3."
    assert stub.submissions == 1
    assert batcher.refused == 1  # the row is well formed: only the request asked told it apart


@pytest.mark.parametrize(("provider", "delay_s"), [("openai", 0.0), ("anthropic", 0.0), ("anthropic", 0.5)])
def test_a_ledger_line_naming_a_batch_of_other_requests_is_refused(
    stub: BatchStub, tmp_path: Path, provider: str, delay_s: float
) -> None:
    """A ``submitted`` line names a real batch at the provider (someone else's, with other
    requests, answered or not yet; Anthropic shows them only with the results): it is not
    collected; this folder's requests go in a new batch."""
    from ape.tasks.models.batch.clients import OpenAIBatchClient
    from ape.tasks.models.batch.trust import request_hash

    stub.delay_s = delay_s
    questions = ["1 + 2", "2 + 3"]
    bodies = {q: _ask(q) for q in questions}
    cids = {custom_id(bodies[q], (q, 0)): bodies[q] for q in questions}
    if provider == "openai":
        import openai

        client: object = OpenAIBatchClient(openai.OpenAI(api_key="k", base_url=stub.base_url, max_retries=0))
    else:
        client = AnthropicBatchClient(api_key="k", base_url=stub.root_url)
    # someone else's batch, of the same size: their requests, their answers
    foreign = client.submit([("other-1", _ask("100 + 1")), ("other-2", _ask("100 + 2"))], "ape-theirs")  # type: ignore[attr-defined]
    line = {"event": "submitted", "batch_id": foreign, "tag": "ape-theirs", "provider": provider}
    line |= {"custom_ids": sorted(cids), "requests": {cid: request_hash(body) for cid, body in cids.items()}}
    _plant(tmp_path, "batches.jsonl", [line])
    batcher = _openai_batcher(stub, tmp_path) if provider == "openai" else _anthropic_batcher(stub, tmp_path)
    answers = _ask_all(batcher, questions)
    if provider == "openai":
        texts = {q: a["choices"][0]["message"]["content"] for q, a in answers.items()}  # type: ignore[index]
    else:
        texts = {q: a["content"][0]["text"] for q, a in answers.items()}  # type: ignore[index]
    assert texts == {"1 + 2": "The answer is 3.", "2 + 3": "The answer is 5."}
    assert stub.submissions == 2  # theirs, and this folder's own new one
    assert batcher.refused == 1
    events = _events(tmp_path)
    assert [e["event"] for e in events] == ["submitted", "refused", "submitting", "submitted", "ended"]
    assert events[1]["batch_id"] == foreign
    rows = [row for row in (tmp_path / "batch_results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and foreign not in "".join(rows)
    _openai_batcher(stub, tmp_path) if provider == "openai" else _anthropic_batcher(stub, tmp_path)
    assert stub.submissions == 2  # a refused batch is not looked at again


def test_a_ledger_line_whose_request_bodies_differ_at_the_provider_is_refused() -> None:
    from ape.tasks.models.batch.trust import ProviderBatch, batch_refusal, request_hash

    line = {"tag": "t", "custom_ids": ["a", "b"], "requests": {"a": request_hash(_ask("1 + 2")), "b": "x"}}
    same = {"a": request_hash(_ask("1 + 2")), "b": "x"}
    assert batch_refusal(line, ProviderBatch(tags_shown=True, tag="t", total=2, requests=same)) is None
    assert "tag" in str(batch_refusal(line, ProviderBatch(tags_shown=True, tag="u", total=2, requests=same)))
    assert "holds 3" in str(batch_refusal(line, ProviderBatch(tags_shown=False, total=3)))
    assert batch_refusal(line, ProviderBatch(tags_shown=False, total=2)) is None  # nothing more shown yet
    changed = {"a": request_hash(_ask("1 + 3")), "b": "x"}
    assert "differ" in str(batch_refusal(line, ProviderBatch(tags_shown=True, tag="t", requests=changed)))
    assert "did not submit" in str(batch_refusal(line, ProviderBatch(tags_shown=False, requests={"a": None})))
    unhashed = {"tag": "t", "custom_ids": ["a", "b"]}  # a line of an older APE, or of no APE
    assert "hash" in str(batch_refusal(unhashed, ProviderBatch(tags_shown=True, tag="t", total=2, requests=same)))


def test_a_resumed_batch_is_collected_once_the_provider_shows_its_requests(stub: BatchStub, tmp_path: Path) -> None:
    """The legitimate resume: the ledger line carries request hashes, the provider's input
    file holds exactly those requests, and the answer rows it writes carry the hashes."""
    import json

    stub.delay_s = 3600.0
    first = _openai_batcher(stub, tmp_path, poll_s=3600.0)
    body = _ask("1 + 2")
    cid = custom_id(body, ("i0", 0))
    threading.Thread(target=first.ask, args=(cid, body), daemon=True).start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "batches.jsonl").exists() or "submitted" not in [e["event"] for e in _events(tmp_path)]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    stub.delay_s = 0.0
    second = _openai_batcher(stub, tmp_path)
    assert second.ask(cid, body)["choices"][0]["message"]["content"] == "The answer is 3."
    assert second.refused == 0 and stub.submissions == 1
    from ape.tasks.models.batch.trust import request_hash

    rows = [json.loads(line) for line in (tmp_path / "batch_results.jsonl").read_text().splitlines()]
    assert [row["request_hash"] for row in rows] == [request_hash(body)]


def test_batch_files_another_user_could_write_are_moved_aside(stub: BatchStub, tmp_path: Path) -> None:
    """A ledger made a link (the batcher would append through it) and answer rows writable by
    everyone are not this user's run's files: moved aside, counted, the request asked again."""
    import os

    from ape.tasks.models.batch.trust import request_hash

    body = _ask("1 + 2")
    cid = custom_id(body, ("i0", 0))
    line = {"event": "submitted", "batch_id": "b1", "tag": "t", "provider": "openai", "custom_ids": [cid]}
    line["requests"] = {cid: request_hash(body)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _plant(elsewhere, "batches.jsonl", [line, {**line, "event": "ended"}])
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "batches.jsonl").symlink_to(elsewhere / "batches.jsonl")
    _plant(folder, "batch_results.jsonl", [_planted_answer(cid, "b1", body)])
    os.chmod(folder / "batch_results.jsonl", 0o666)
    batcher = _openai_batcher(stub, folder)
    assert batcher.ask(cid, body)["choices"][0]["message"]["content"] == "The answer is 3."
    assert stub.submissions == 1
    assert batcher.refused == 2
    assert (folder / "batches.jsonl.refused").is_symlink() and (folder / "batch_results.jsonl.refused").exists()
    assert len(_events(elsewhere)) == 2  # nothing was appended through the link
