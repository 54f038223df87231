"""WriteBehind runs the writes of many threads in order, waits by ticket, never loses a failure."""

from __future__ import annotations

import threading

import pytest

from ape.tasks.common.write_behind import WriteBehind


def test_writes_of_many_threads_run_in_ticket_order_and_a_wait_sees_them() -> None:
    writer = WriteBehind(limit=3)  # a small queue: submitters wait for room
    ran: list[tuple[int, int]] = []  # (thread, its n-th write), in the order the writer ran them
    ticket_of: dict[tuple[int, int], int] = {}

    def submitter(thread: int) -> None:
        for n in range(50):
            ticket = writer.submit(lambda token=(thread, n): ran.append(token))
            ticket_of[(thread, n)] = ticket
            assert writer.mine() == ticket  # this thread's own last ticket

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.wait(300)
    assert len(ran) == 300
    assert [ticket_of[token] for token in ran] == list(range(1, 301))  # run in ticket order, each once
    writer.close()


def test_wait_returns_only_after_the_write_ran() -> None:
    writer = WriteBehind()
    gate, done = threading.Event(), []
    ticket = writer.submit(lambda: (gate.wait(5), done.append(1)))
    threading.Timer(0.05, gate.set).start()
    writer.wait(ticket)
    assert done == [1]
    writer.close()


def test_a_failed_write_is_raised_to_the_waiter_and_the_later_ones_do_not_run() -> None:
    writer = WriteBehind()
    ran: list[str] = []

    def fail() -> None:
        raise OSError(28, "No space left on device", "/cache/abc")

    writer.submit(lambda: ran.append("before"))
    bad = writer.submit(fail)
    later = threading.Event()
    with pytest.raises(OSError, match="No space left"):
        writer.wait(bad)
    with pytest.raises(OSError):  # every later submit, wait and close says so too
        writer.submit(later.set)
    with pytest.raises(OSError):
        writer.close()
    assert ran == ["before"] and not later.is_set()


def test_close_runs_what_is_queued() -> None:
    writer = WriteBehind()
    gate, ran = threading.Event(), []
    writer.submit(lambda: gate.wait(5))
    for n in range(5):
        writer.submit(lambda n=n: ran.append(n))
    threading.Timer(0.05, gate.set).start()
    writer.close()
    assert ran == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(lambda: None)
