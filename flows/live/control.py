"""Pause, resume and drain one model's running loop (:mod:`ape.schemas.control`).

A thread of its own reads the control channels about once a second (the request file, the
Prefect variable, and while the run holds its flow run Paused, the flow run's state), so the
loop that saves only reads one attribute, :attr:`RunControl.mode`, per pass:

- ``pause``: the loop starts no new item; the items in flight finish and are saved; then
  :meth:`RunControl.hold` sets the flow run **Paused** (the UI shows it, with its Resume
  button) and waits, until a channel says ``run`` (``ape ctl resume``, the variable) or the
  flow run is resumed (its Resume button): then the flow run is Running again and the loop
  goes on from the next unsaved item, so no saved item is called again.
- ``drain``: the loop starts no new item, finishes what is in flight, and ends; the run ends
  resumably (:class:`ape.flows.evaluate.Drained`, exit code 4), the next ``ape run`` goes on.

Channels act on a *change*: a request is acted on once, when it is first seen, so a Resume
from the UI is not undone by a variable or file that still says ``pause``. ``drain`` is final.
A server that does not answer (503, a restart) costs a tick: the error goes to run.log once
and the next tick tries again; it never ends the run. Each action is a
:class:`ape.schemas.control.ControlEvent` (who, when, what changed): in run.log, and in
``metadata.json``/``report.json`` through :attr:`RunControl.events`.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from ape.flows.logs import CONSOLE_SKIP
from ape.schemas.config import ApeConfig
from ape.schemas.control import Action, ControlEvent, variable_name
from ape.tasks.common.deadline import END_WAIT_S, finished_within
from ape.tasks.storage import prefect_api
from ape.tasks.storage.control_channel import (
    Refused,
    Request,
    create_variable,
    delete_variable,
    read_request_file,
    read_variable,
)

__all__ = ["POLL_EVERY_S", "RunControl", "control_log", "recorded_events"]

log = logging.getLogger("ape")

POLL_EVERY_S = 1.0
ClientFactory = Callable[[], Any]


class RunControl:
    """The control of one model's loop while the ``with`` block runs (module docstring)."""

    def __init__(
        self,
        *,
        out_dir: Path,
        model: str,
        flow_run_id: UUID | None,
        server: bool = True,
        every_s: float = POLL_EVERY_S,
        client: ClientFactory = prefect_api.sync_client,
    ):
        self.out_dir = out_dir
        self.model = model
        self.flow_run_id = flow_run_id if server else None  # the variable and Paused need a server
        self.mode: Action = "run"
        self.events: list[ControlEvent] = []
        self.resume_hint = f"`ape ctl resume {out_dir}`"
        self._every_s = every_s
        self._client_factory = client
        self._started = datetime.now(UTC)
        self._seen: dict[str, str] = {}  # channel -> identity of the request last seen there
        self._said: set[str] = set()  # refusals and errors told in run.log (each once)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held_on_server = False  # the flow run is Paused by hold()
        self._variable = False

    # -- the loop's side -----------------------------------------------------------------
    def __enter__(self) -> RunControl:
        if self.flow_run_id is not None:
            try:
                with self._client_factory() as client:
                    create_variable(client, self.flow_run_id)
                self._variable = True
            except Exception as exc:  # the file channel still works
                self._tell("variable", f"could not create the control variable: {type(exc).__name__}: {exc}")
        thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self._poll_every,), name="ape-control", daemon=True
        )
        self._thread = thread
        thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=END_WAIT_S)  # a poll stuck on a busy server is not waited for
        if self._variable and self.flow_run_id is not None:
            self._drop_variable(self.flow_run_id)

    def _drop_variable(self, flow_run_id: UUID) -> None:
        """Delete the run's control variable, waiting at most :data:`END_WAIT_S` for the server:
        a busy or stopped one held the run's end for minutes (Prefect's client retries each
        request), a Ctrl-C too. One left behind is named after a finished flow run: harmless."""

        def drop() -> None:
            try:
                with self._client_factory() as client:
                    delete_variable(client, flow_run_id)
            except Exception:  # left behind, as below
                pass

        if not finished_within(drop, END_WAIT_S, "ape-control-end"):
            self._tell(
                "variable-left",
                f"the Prefect server did not answer within {END_WAIT_S:.0f} s: control variable "
                f"{variable_name(flow_run_id)} is left on it (named after this finished flow run, harmless)",
            )

    def hold(self, saved: int, total: int) -> None:
        """Called by the loop when paused and nothing is in flight: the flow run goes Paused
        until a channel or the UI resumes it (or drains or cancels it)."""
        self._record("paused", "ape", f"{saved} of {total} items saved, none in flight; the run waits")
        log.info(
            "%s: paused with %d of %d items saved; resume with %s%s",
            self.model,
            saved,
            total,
            self.resume_hint,
            " or the flow run's Resume button in the Prefect UI" if self.flow_run_id else "",
        )
        self._set_paused()
        with self._changed:
            while self.mode == "pause" and not self._stop.is_set():
                self._changed.wait(timeout=self._every_s)
        if self._held_on_server:
            self._set_running()

    # -- the polling thread ----------------------------------------------------------------
    def _poll_every(self) -> None:
        with self._client() as client:
            while not self._stop.wait(self._every_s):
                self.poll(client)

    def poll(self, client: Any) -> None:
        """Read each channel once and act on what changed (one tick)."""
        try:
            self._offer("file", read_request_file(self.out_dir, since=self._started))
        except Refused as exc:
            self._tell(f"file:{exc}", f"control request refused: {exc}")
        except OSError as exc:
            self._tell("file-error", f"control file not read: {exc}")
        if client is None or self.flow_run_id is None:
            return
        try:
            self._offer("variable", read_variable(client, self.flow_run_id))
        except Refused as exc:
            self._tell(f"variable:{exc}", f"control variable {variable_name(self.flow_run_id)}: {exc}")
        except Exception as exc:  # 503, 404 during a restart, a timeout: the next tick tries again
            name = type(exc).__name__
            self._tell(f"server:{name}", f"control variable not read ({name}: {exc}); retrying")
        if self._held_on_server:
            try:
                state = client.read_flow_run(self.flow_run_id).state
            except Exception as exc:
                self._tell(f"server:{type(exc).__name__}", f"flow run not read ({type(exc).__name__}: {exc}); retrying")
                return
            if state is not None and state.is_running():
                self._offer("state", Request("run", "Prefect UI or API (Resume)", f"state:{state.id}"))
            elif state is not None and (state.is_cancelling() or state.is_cancelled()):
                self._offer("state", Request("drain", "a cancel of the flow run", f"state:{state.id}"))

    def _offer(self, channel: str, request: Request | None) -> None:
        if request is None or self._seen.get(channel) == request.identity:
            return
        first = channel not in self._seen
        self._seen[channel] = request.identity
        if first and channel == "variable" and request.action == "run":
            return  # the value the run created it with
        self.apply(request.action, request.by)

    def apply(self, action: Action, by: str) -> None:
        """Take ``action`` asked by ``by``: a change of mode, recorded; the same mode again is nothing."""
        with self._changed:
            before = self.mode
            if action == before:
                return
            if before == "drain":
                self._tell(f"final:{action}:{by}", f"{action} asked by {by} after a drain: ignored (a drain is final)")
                return
            if action == "pause":
                changed = "no new item starts; the items going finish and are saved, then the run waits"
                event = "pause"
            elif action == "drain":
                changed = "no new item starts; the items going finish and are saved, then the run ends resumably"
                event = "drain"
            else:
                changed = "new items start again"
                event = "resume"
            self.mode = action
            self._record(event, by, changed)
            self._changed.notify_all()

    # -- helpers ---------------------------------------------------------------------------
    def _record(self, action: str, by: str, changed: str) -> None:
        event = ControlEvent.model_validate({"action": action, "by": by, "at": datetime.now(UTC), "changed": changed})
        self.events.append(event)
        log.info("%s: %s (by %s): %s", self.model, action, by, changed)

    def _set_paused(self) -> None:
        if self.flow_run_id is None:
            return
        try:
            with self._client_factory() as client:
                # no timeout: a pause lasts until someone resumes it; not rescheduled: this process waits
                result = client.set_flow_run_state(self.flow_run_id, prefect_api.paused_state(_pause_key()))
            self._held_on_server = result.state is not None and result.state.is_paused()
            if not self._held_on_server:
                said = f"the server did not take the Paused state ({result.details}); paused here"
                self._tell("paused-refused", said)
        except Exception as exc:
            self._tell("paused-error", f"could not set the flow run Paused ({type(exc).__name__}: {exc}); paused here")

    def _set_running(self) -> None:
        """The flow run Running again (unless the UI's Resume did it already)."""
        assert self.flow_run_id is not None  # held on the server only with a flow run
        self._held_on_server = False
        try:
            with self._client_factory() as client:
                state = client.read_flow_run(self.flow_run_id).state
                if state is not None and state.is_paused():
                    client.resume_flow_run(self.flow_run_id)
        except Exception as exc:
            self._tell("resume-error", f"could not set the flow run Running ({type(exc).__name__}: {exc})")

    @contextmanager
    def _client(self) -> Iterator[Any]:
        if self.flow_run_id is None:
            yield None
            return

        def down(exc: BaseException) -> None:
            self._tell("client", f"no Prefect client for the control channel ({exc}); the file channel still works")

        with prefect_api.client_or_none(down, self._client_factory) as client:
            yield client

    def _tell(self, key: str, text: str) -> None:
        """One warning in run.log per kind of trouble (a channel read every second would flood it)."""
        if key in self._said:
            return
        self._said.add(key)
        log.warning("%s: %s", self.model, text, extra={CONSOLE_SKIP: True})


def recorded_events(previous: Any) -> list[ControlEvent]:
    """The control actions a model's metadata.json records (``previous``, its parsed JSON):
    for a resumed run's log, and for the report. The file is read back, so only
    entries that validate as :class:`ControlEvent` are kept; anything else is dropped with a
    debug line (the run goes on without it)."""
    kept: list[ControlEvent] = []
    entries = previous.get("control") if isinstance(previous, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        try:
            kept.append(ControlEvent.model_validate(entry))
        except ValueError as exc:
            log.debug("a recorded control entry left out: %s", exc)
    return kept


def control_log(config: ApeConfig) -> list[dict[str, Any]]:
    """Each model's control actions of this run (its metadata.json's ``control``), one list
    with the model named, in time order: the report's ``summary.control``."""
    events: list[dict[str, Any]] = []
    for model in config.model:
        path = config.output_dir_for(model) / config.run.metadata_file
        try:
            metadata = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # no file yet, or not JSON
            log.debug("no control log in %s: %s", path, exc)
            continue
        events += [{"model": model.model_id, **e.model_dump(mode="json")} for e in recorded_events(metadata)]
    return sorted(events, key=lambda e: e["at"])


_PAUSES = iter(range(1, 1 << 62))


def _pause_key() -> str:
    """A fresh pause key each time (Prefect refuses a second pause with the same key)."""
    return f"ape-{next(_PAUSES)}"
