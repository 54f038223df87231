"""The batch board: what the progress bar's batch column and the ``<model>-batches`` artifact
show while a batch waits, fed by a real batcher against the loopback stub."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from rich.progress import Progress

from ape.flows.live.batch_column import BatchColumn
from ape.flows.live.batch_table import artifact_key_for
from ape.tasks.models.batch.batcher import Batcher, BatchSettings, custom_id
from ape.tasks.models.batch.status import BatchBoard, BatchTable, board_for, show_batches, waiting_text
from tests.helpers.batch_stub import BatchStub
from tests.helpers.paths import REPO_ROOT

pytest.importorskip("openai")


@pytest.fixture
def stub() -> Iterator[BatchStub]:
    server = BatchStub(delay_s=3600.0)
    yield server
    server.close()


def _until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_waiting_batch_shows_in_the_bar_and_the_table_then_done(stub: BatchStub, tmp_path: Path) -> None:
    import openai

    from ape.tasks.models.batch.clients import OpenAIBatchClient

    model = f"m-{uuid4().hex[:8]}"
    client = OpenAIBatchClient(openai.OpenAI(api_key="k", base_url=stub.base_url, max_retries=0))
    batcher = Batcher(model, tmp_path, client, BatchSettings(size=10, wait_s=0.05, poll_s=0.05))
    assert waiting_text(model) == ""  # nothing waits: the column is empty
    body = {"model": "stub", "messages": [{"role": "user", "content": "What is 1 + 2?"}]}
    answer: dict = {}
    asker = threading.Thread(target=lambda: answer.update(batcher.ask(custom_id(body, ("i0", 0)), body)))
    asker.start()
    _until(lambda: "in_progress" in waiting_text(model))

    line = waiting_text(model)
    assert line.startswith("batch batch_") and "in_progress 0/1" in line and line.endswith(" s")
    bar = Progress(BatchColumn(model))
    bar.add_task("bench · model", total=1)
    assert bar.columns[0].render(bar.tasks[0]).plain == line  # type: ignore[union-attr]
    table = board_for(model).markdown()
    assert table.startswith("**waiting** for 1 of 1 batch(es)")
    assert "in_progress" in table and "completed 0, failed 0, total 1" in table

    stub.delay_s = 0.0  # the provider finishes
    asker.join(30)
    assert answer["choices"][0]["message"]["content"] == "The answer is 3."
    assert waiting_text(model) == ""
    table = board_for(model).markdown()
    assert table.startswith("**done**: all 1 batch(es)") and "completed" in table and "(ended)" in table


def test_artifact_writes_are_throttled_with_a_trailing_write() -> None:
    board = BatchBoard("throttled", publish_every_s=0.3)
    writes: list[str] = []
    board._write = lambda: writes.append(board.markdown())  # type: ignore[method-assign]
    board.asked_from(uuid4())
    board.submitted("b1", 3)  # at once
    for n in range(20):  # polls faster than the interval: held back, the last one written later
        board.polled("b1", "in_progress", {"completed": n, "total": 3}, ended=False)
    assert len(writes) == 1
    _until(lambda: len(writes) == 2, timeout=5)
    assert "completed 19" in writes[-1]
    board.ended("b1", "completed")  # an end is written at once
    assert len(writes) == 3 and writes[-1].startswith("**done**")


def test_the_table_goes_to_the_displays_registered_for_the_model_until_they_stop() -> None:
    model = f"m-{uuid4().hex[:8]}"
    board = board_for(model)
    board.publish_every_s = 0.0
    shown: list[BatchTable] = []
    other: list[BatchTable] = []
    stop = show_batches(model, shown.append)
    show_batches("another model", other.append)
    board.submitted("b1", 2)
    assert shown == []  # no flow run has asked yet: nowhere to show it
    run = uuid4()
    board.asked_from(run)
    assert [(t.model_id, t.flow_run_id) for t in shown] == [(model, run)]
    assert shown[-1].markdown.startswith("**waiting** for 1 of 1 batch(es)")
    stop()
    board.ended("b1", "completed")
    assert len(shown) == 1 and other == []
    late: list[BatchTable] = []
    show_batches(model, late.append)  # registered after the batches began: shown at once
    assert late and late[0].markdown.startswith("**done**")


def test_a_failing_display_costs_the_batches_nothing() -> None:
    model = f"m-{uuid4().hex[:8]}"
    board = board_for(model)

    def broken(table: BatchTable) -> None:
        raise ConnectionError("no API")

    show_batches(model, broken)
    board.asked_from(uuid4())
    board.submitted("b1", 1)
    board.ended("b1", "completed")
    assert board.rows()[0].ended


def test_the_models_layer_writes_no_prefect_artifacts() -> None:
    models = REPO_ROOT / "tasks" / "models"
    writers = [
        p.name for p in models.rglob("*.py") if "upsert_artifact" in p.read_text() or "create_artifact" in p.read_text()
    ]
    assert writers == []


def test_artifact_key_is_a_prefect_key() -> None:
    assert artifact_key_for("GPT 4o/mini") == "gpt-4o-mini-batches"


def test_refused_batch_records_are_on_the_table_and_taken_once_into_a_summary() -> None:
    from ape.tasks.models.batch.status import take_refused

    board = BatchBoard("refusing")
    board.refused(2)
    board.refused(1)
    assert "refused: 3 batch(es) or answer row(s)" in board.markdown()
    assert board.take_refused() == 3 and board.take_refused() == 0
    assert "refused: 3" in board.markdown()  # the artifact keeps saying it
    assert take_refused("a model that never batched") == 0
