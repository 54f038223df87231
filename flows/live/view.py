"""The live view of one model's run: in the Prefect UI and in ``live.json``, every few seconds.

While an evaluate flow runs, a thread of its own (never the solver workers, never the loop
that saves) takes a snapshot of the model's counts (:class:`ape.tasks.report.live.LiveCounts`)
every :data:`PUBLISH_EVERY_S` seconds and

- rewrites ``live.json`` in the model's output folder (:mod:`ape.schemas.live`; what
  ``ape status`` reads), atomically and with the run's owner-only mode;
- updates two artifacts of the flow run: a progress artifact (items done, in percent) and a
  markdown artifact keyed ``<benchmark>-live-<model>`` with the numbers (items done of total,
  pass rate and its interval, errors, truncations, requests in flight, requests and tokens
  per minute, time left). Each is created once and then updated in place (one request per
  snapshot each, and only when its text changed), not created anew: the UI's artifact list
  stays one entry per model and run.

The saving loop only counts (:meth:`LiveView.add`: a few additions under a lock per item).
When the loop ends, the thread stops and one last snapshot is published from the flow's own
thread, with the state ``finished`` (every item done) or ``stopped``: at the end of a run its
numbers are the report's.

A server that does not answer costs the live view only: live.json keeps being written,
run.log says once that the UI's view could not be updated, and each snapshot tries again.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from ape.flows.logs import CONSOLE_SKIP
from ape.schemas.live import LIVE_FILE, LiveStatus, State
from ape.schemas.results import OutputBatch
from ape.tasks.common.deadline import END_WAIT_S, finished_within
from ape.tasks.common.inert import md_text
from ape.tasks.models.limits.meter import CallMeter
from ape.tasks.report.live import LiveCounts, describe
from ape.tasks.storage import prefect_api
from ape.tasks.storage.save import atomic_write_text, read_batches

__all__ = ["PUBLISH_EVERY_S", "LiveView", "live_markdown"]

log = logging.getLogger("ape")

PUBLISH_EVERY_S = 3.0
# live.json's state while the loop goes, by the control mode (ape.flows.live.control) it is in
GOING_STATES: dict[str, State] = {"run": "running", "pause": "paused", "drain": "draining"}


def artifact_key(benchmark: str, model: str) -> str:
    """``<benchmark>-live-<model>`` in what Prefect allows in a key (lowercase ASCII letters,
    digits, dashes), the benchmark first as the run's other artifacts have it."""

    return prefect_api.artifact_key(
        prefect_api.artifact_key(benchmark), "live", prefect_api.artifact_key(model, fallback="model")
    )


def live_markdown(status: LiveStatus) -> str:
    """The markdown artifact's text: the numbers of :func:`ape.tasks.report.live.describe`."""
    lines = [
        f"### {md_text(status.benchmark)} · {md_text(status.model)}: live view",
        "",
        "| | |",
        "|---|---|",
        *(f"| {what} | {value} |" for what, value in describe(status, status.updated_at)),
        "",
        f"Updated {status.updated_at:%Y-%m-%d %H:%M:%S} UTC, every {PUBLISH_EVERY_S:g} s while the run goes; "
        "`ape status OUTPUT` prints the same.",
    ]
    return "\n".join(lines) + "\n"


class LiveView:
    """Publishes one model's live view while the ``with`` block runs (module docstring)."""

    def __init__(
        self,
        *,
        out_dir: Path,
        benchmark: str,
        model: str,
        label: str,
        total: int,
        results_path: Path,
        resumed: Collection[str] = (),
        meter: CallMeter | None = None,
        items_in_flight: Callable[[], int] = lambda: 0,
        control_mode: Callable[[], str] = lambda: "run",
        flow_run_id: UUID | None = None,
        every_s: float = PUBLISH_EVERY_S,
    ):
        self.counts = LiveCounts(benchmark, model, total)
        self.path = out_dir / LIVE_FILE
        self.label = label
        self._results_path = results_path
        self._resumed = set(resumed)
        self._meter = meter
        self._requests_before = meter.read()[1] if meter is not None else 0
        self._items_in_flight = items_in_flight
        self._control_mode = control_mode
        self._flow_run_id = flow_run_id
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._artifacts: dict[str, UUID] = {}  # "progress" / "markdown" -> artifact id
        self._shown: dict[str, Any] = {}  # what each artifact shows now
        self._ui_said = False  # run.log told that the UI's view failed (told once)
        self.last: LiveStatus | None = None

    # -- the saving loop's side ------------------------------------------------------------
    def add(self, batch: OutputBatch) -> None:
        """Count one item saved by this run (called per saved item: cheap)."""
        self.counts.add(batch)

    def __enter__(self) -> LiveView:
        thread = threading.Thread(
            target=contextvars.copy_context().run,  # Prefect's settings as the flow has them
            args=(self._publish_every,),
            name="ape-live-view",
            daemon=True,
        )
        self._thread = thread
        thread.start()
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=END_WAIT_S)  # a snapshot stuck on a busy server is not waited for
        c = self.counts
        state: State = "finished" if exc_type is None and c.done >= c.total else "stopped"
        self._publish(state, None)  # live.json now, whatever the server
        if self._flow_run_id is None:
            return

        def show() -> None:
            with self._client() as client:
                if client is not None and self.last is not None:
                    self._send(client, self.last)

        if not finished_within(show, END_WAIT_S, "ape-live-view-end"):
            log.warning(
                "%s: the Prefect server did not take the live view's last snapshot within %.0f s; live.json has it",
                self.label,
                END_WAIT_S,
                extra={CONSOLE_SKIP: True},
            )

    # -- the publishing thread -------------------------------------------------------------
    def _publish_every(self) -> None:
        try:
            self._count_resumed()
            with self._client() as client:
                while True:
                    self._publish(GOING_STATES.get(self._control_mode(), "running"), client)
                    if self._stop.wait(self._every_s):
                        return
        except Exception as exc:  # the run goes on; its last snapshot is published at the end
            log.warning("live view stopped: %s: %s", type(exc).__name__, exc, extra={CONSOLE_SKIP: True})

    def _count_resumed(self) -> None:
        """The items an earlier run saved, counted from results.jsonl (read here, not by the
        saving loop: a resumed run of many items would wait for it otherwise). Lines this run
        appends meanwhile are not among them, and a torn last one is left out by the reader."""
        if not self._resumed:
            return
        latest: dict[str, OutputBatch] = {}
        for batch in read_batches(self._results_path):
            if batch.item_id in self._resumed:
                latest[batch.item_id] = batch
        for batch in latest.values():
            self.counts.add(batch, resumed=True)

    @contextmanager
    def _client(self) -> Iterator[Any]:
        """A Prefect client for this flow run's artifacts; None without a flow run (a runner
        called directly) or when none can be made."""
        if self._flow_run_id is None:
            yield None
            return
        with prefect_api.client_or_none(self._ui_down) as client:
            yield client

    def _publish(self, state: State, client: Any) -> None:
        in_flight, started = self._meter.read() if self._meter is not None else (None, None)
        status = self.counts.status(
            state,
            requests=None if started is None else started - self._requests_before,
            requests_in_flight=in_flight,
            items_in_flight=self._items_in_flight() if state in GOING_STATES.values() else 0,
            flow_run_id=str(self._flow_run_id) if self._flow_run_id else None,
        )
        self.last = status
        atomic_write_text(self.path, status.model_dump_json(indent=2) + "\n")
        if client is not None:
            self._send(client, status)

    def _send(self, client: Any, status: LiveStatus) -> None:
        """The snapshot to the Prefect UI; a failure is said once (:meth:`_ui_down`)."""
        try:
            self._show(client, status)
        except Exception as exc:
            self._ui_down(exc)

    def _show(self, client: Any, status: LiveStatus) -> None:
        percent = round(100.0 * status.done / status.total, 1) if status.total else 100.0
        wanted: dict[str, Any] = {"progress": percent, "markdown": live_markdown(status)}
        for kind, data in wanted.items():
            if self._shown.get(kind) == data:
                continue
            what = "items done" if kind == "progress" else "live view"
            self._artifacts[kind] = prefect_api.upsert_artifact(
                client,
                self._artifacts.get(kind),
                key=artifact_key(status.benchmark, status.model) if kind == "markdown" else None,
                kind=kind,
                data=data,
                description=f"{self.label}: {what}",
                flow_run_id=self._flow_run_id,
            )
            self._shown[kind] = data

    def _ui_down(self, exc: BaseException) -> None:
        """The Prefect UI's view could not be updated: said once in run.log (the next snapshot
        tries again); live.json goes on."""
        if not self._ui_said:
            self._ui_said = True
            log.warning(
                "%s: the live view in the Prefect UI could not be updated (%s: %s); live.json is, "
                "and each snapshot tries the UI again",
                self.counts.model,
                type(exc).__name__,
                exc,
                extra={CONSOLE_SKIP: True},
            )
