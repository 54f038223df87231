"""ThreadFeeder hands back each finished item once, gathers a wave, and skips withdrawn ones."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from queue import SimpleQueue

from ape.flows.feeders import ThreadFeeder


def _feeder(workers: int, run) -> ThreadFeeder:
    """A ThreadFeeder whose items are run by ``run`` (no model, no Prefect)."""
    feeder = ThreadFeeder.__new__(ThreadFeeder)
    feeder.pool = ThreadPoolExecutor(max_workers=workers)
    feeder.pending = set()
    feeder._items = {}
    feeder._finished = SimpleQueue()
    feeder._run = run  # type: ignore[method-assign]
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
