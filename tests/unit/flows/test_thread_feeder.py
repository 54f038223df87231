"""ThreadFeeder hands back each finished item once, gathers a wave, and skips withdrawn ones."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue

import pytest

from ape.flows.feeders import ThreadFeeder
from ape.tasks.common.write_behind import WriteBehind


class _Log:
    """The session log's side the feeder uses: how often it was flushed."""

    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1


def _feeder(workers: int, run, writer: WriteBehind | None = None) -> ThreadFeeder:
    """A ThreadFeeder whose items are run by ``run`` (no model, no Prefect)."""
    feeder = ThreadFeeder.__new__(ThreadFeeder)
    feeder.pool = ThreadPoolExecutor(max_workers=workers)
    feeder.pending = set()
    feeder._items = {}
    feeder._finished = SimpleQueue()
    feeder.session_log = _Log()  # type: ignore[assignment]
    feeder.cache, feeder.writer = None, writer
    feeder._raised = None
    feeder._run = lambda item: (run(item), writer.mine() if writer else 0)  # type: ignore[method-assign]
    return feeder


def test_every_item_comes_back_once_and_a_wave_together() -> None:
    feeder = _feeder(8, lambda item: item)
    for item in range(200):
        feeder.submit(item)  # type: ignore[arg-type]
    seen: list[int] = []
    while feeder.pending:
        seen += feeder.next_done()  # type: ignore[arg-type]
    feeder.close()
    assert sorted(seen) == list(range(200)) and not feeder._items

    gate = threading.Event()
    feeder = _feeder(4, lambda item: gate.wait(5) and item)
    for item in range(4):
        feeder.submit(item)  # type: ignore[arg-type]
    gate.set()  # all four finish at once: one call returns the wave
    assert sorted(feeder.next_done()) == [0, 1, 2, 3] and not feeder.pending  # type: ignore[type-var]
    feeder.close()


def test_withdrawn_items_are_not_returned_and_the_running_one_is() -> None:
    started, gate = threading.Event(), threading.Event()

    def run(item: int) -> int:
        started.set()
        gate.wait(5)
        return item

    feeder = _feeder(1, run)
    for item in range(5):
        feeder.submit(item)  # type: ignore[arg-type]
    assert started.wait(5)
    taken = feeder.withdraw()  # the four queued ones; item 0 is running
    assert taken == [1, 2, 3, 4] and len(feeder.pending) == 1
    threading.Timer(0.1, gate.set).start()
    began = time.monotonic()
    assert feeder.next_done() == [0]  # type: ignore[comparison-overlap]
    assert time.monotonic() - began >= 0.05 and not feeder.pending  # it waited for the running one
    feeder.close()


def test_an_item_comes_back_only_once_its_cache_writes_and_transcripts_are_written() -> None:
    writer = WriteBehind(limit=2)
    slow = threading.Event()
    written: list[int] = []

    def run(item: int) -> int:
        def write() -> None:
            slow.wait(5)  # a slow disk: the write is still queued when the item ends
            written.append(item)

        writer.submit(write)
        return item

    feeder = _feeder(1, run, writer)
    feeder.submit(7)  # type: ignore[arg-type]
    threading.Timer(0.1, slow.set).start()
    assert feeder.next_done() == [7]  # type: ignore[comparison-overlap]
    assert written == [7]  # returned (and so saved by the runner) after its write ran
    assert feeder.session_log.flushes == 1  # type: ignore[attr-defined]
    feeder.pool.shutdown()
    writer.close()


def _failing_run(writer: WriteBehind):
    def run(item: int) -> int:
        def write() -> None:
            raise OSError(28, "No space left on device", f"cache/{item}.json")

        writer.submit(write)
        return item

    return run


def test_a_failed_cache_write_is_raised_once_and_not_logged_again_at_close(caplog: pytest.LogCaptureFixture) -> None:
    writer = WriteBehind()
    feeder = _feeder(1, _failing_run(writer), writer)
    feeder.submit(3)  # type: ignore[arg-type]
    with pytest.raises(OSError, match="No space left"):
        feeder.next_done()  # the runner turns this into SaveFailed, naming the file
    with caplog.at_level(logging.WARNING, logger="ape"):
        feeder.close()
    assert "cache write failed" not in caplog.text


def test_a_failed_cache_write_no_item_returned_is_logged_at_close(caplog: pytest.LogCaptureFixture) -> None:
    writer = WriteBehind()
    feeder = _feeder(1, _failing_run(writer), writer)
    feeder.submit(4)  # type: ignore[arg-type]
    feeder.pool.shutdown(wait=True)  # the item ran; the run stopped before taking it back
    with caplog.at_level(logging.WARNING, logger="ape"):
        feeder.close()
    assert caplog.text.count("a session cache write failed") == 1
    assert "cache/4.json" in caplog.text or "No space left" in caplog.text
