"""The catch-up's pacing on the events the server stored (ape.tasks.recording.event_pace),
against a fake counter and a fake clock: no server, no real waiting."""

from __future__ import annotations

from ape.tasks.recording.event_pace import EventPace


class FakePersister:
    """A server whose persister stores ``rate`` events a second of what was sent, after a
    baseline of ``before`` events it already held; ``working`` False: it stores nothing."""

    def __init__(self, rate: int, before: int = 0, working: bool = True) -> None:
        self.now = 0.0
        self.rate = rate
        self.before = before
        self.working = working
        self.pace: EventPace | None = None
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def count(self) -> int:
        self.calls += 1
        assert self.pace is not None
        stored = min(self.pace.sent, int(self.now * self.rate)) if self.working else 0
        return self.before + stored


def _pace(server: FakePersister, said: list[str], enabled: bool = True) -> EventPace:
    pace = EventPace(server.count, said.append, enabled=enabled, clock=server.clock, sleep=server.sleep)
    server.pace = pace
    pace.start()
    return pace


def test_sending_waits_while_more_than_the_budget_is_not_stored() -> None:
    server, said = FakePersister(rate=1000, before=777), []
    pace = _pace(server, said)
    pace.add(12_000)
    assert pace.wait(5_000) is True
    assert pace.lag() <= 5_000
    assert server.now >= 7.0  # it waited for the persister: 7,000 stored at 1,000 a second
    assert said == []


def test_within_the_budget_nothing_is_asked() -> None:
    server, said = FakePersister(rate=1000), []
    pace = _pace(server, said)
    asked = server.calls
    pace.add(4_000)
    assert pace.wait(5_000) is True
    assert server.calls == asked and server.now == 0.0


def test_the_end_waits_until_every_event_is_stored_and_the_count_settled() -> None:
    server, said = FakePersister(rate=500, before=40), []
    pace = _pace(server, said)
    pace.add(3_000)
    progress: list[tuple[int, int]] = []
    assert pace.wait(0, limit_s=300, on_progress=lambda held, sent: progress.append((held, sent))) is True
    assert pace.stored == 3_000 and pace.lag() == 0
    assert progress and progress[0][1] == 3_000  # a progress line while it waited


def test_the_end_wait_is_bounded() -> None:
    server, said = FakePersister(rate=10), []
    pace = _pace(server, said)
    pace.add(3_000)
    assert pace.wait(0, limit_s=30) is False
    assert 30.0 <= server.now < 32.0
    assert pace.on  # still storing: not a stall, nothing said
    assert said == []


def test_a_persister_that_stores_nothing_is_said_once_and_never_waited_for_again() -> None:
    server, said = FakePersister(rate=1000, working=False), []
    pace = _pace(server, said)
    pace.add(12_000)
    assert pace.wait(5_000) is False
    assert 60.0 <= server.now < 62.0  # the stall bound, not forever
    assert pace.wait(5_000) is False and pace.wait(0, limit_s=300) is False
    assert server.now < 62.0
    assert len(said) == 1 and "pacing on task runs only" in said[0]


def test_a_persister_switched_off_in_the_settings_costs_no_query_and_no_wait() -> None:
    server, said = FakePersister(rate=1000), []
    pace = _pace(server, said, enabled=False)
    pace.add(12_000)
    assert pace.wait(5_000) is False and pace.wait(0) is False
    assert server.calls == 0 and server.now == 0.0
    assert len(said) == 1 and "event persister is off" in said[0]


def test_a_server_that_does_not_count_events_falls_back_to_task_runs() -> None:
    said: list[str] = []

    def broken() -> int:
        raise RuntimeError("404 Not Found")

    pace = EventPace(broken, said.append, sleep=lambda s: None)
    pace.start()
    pace.add(12_000)
    assert pace.wait(5_000) is False
    assert len(said) == 1 and "404 Not Found" in said[0]
