"""One model's run while it goes: what it shows and what it obeys, as one object.

:class:`LiveRun` is built by the evaluate flow's runner once the run's items are known and
handed to its saving loop. It holds

- the terminal's progress bar (:class:`ape.flows.progress.ProgressView`, with the batch
  column of :mod:`ape.flows.live.batch_column`),
- the live view (:mod:`ape.flows.live.view`: ``live.json`` and the flow run's artifacts),
  and for a batch model the table of its batches (:mod:`ape.flows.live.batch_table`),
- the control of the loop (:mod:`ape.flows.live.control`: pause, resume and drain through
  the channels of :mod:`ape.tasks.storage.control_channel`),
- and what the run notes in ``metadata.json`` of them: the control actions (``control``) and
  the Prefect server's limits the model's calls took (``server_limits``).

The loop asks it one thing per turn (:attr:`LiveRun.mode`), tells it each saved batch
(:meth:`LiveRun.saw`) and lets it hold a paused run (:meth:`LiveRun.hold`).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any
from uuid import UUID

from ape.flows.live.batch_table import BatchArtifact
from ape.flows.live.control import RunControl
from ape.flows.live.view import LiveView
from ape.flows.progress import ProgressView, Tally, report_errors
from ape.schemas.control import Action
from ape.schemas.results import OutputBatch
from ape.tasks.models.batch.status import show_batches
from ape.tasks.models.limits.meter import meter_for
from ape.tasks.models.limits.policy import uses_server_limits
from ape.tasks.models.limits.server import limit_names, limit_notes, server_limits_enabled
from ape.tasks.setup.model import ModelSetup
from ape.tasks.storage.save import SaveHandler

__all__ = ["LiveRun"]


class LiveRun:
    """The progress bar, live view and control of one model's run (module docstring); a
    context manager around the loop, entering them in that order."""

    def __init__(
        self,
        setup: ModelSetup,
        *,
        tally: Tally,
        results_path: Any,
        resumed: list[str],
        in_flight: Any,
        flow_run_id: str | None,
        earlier_control: list[Any],
    ):
        cfg = setup.config
        self.setup = setup
        self.tally = tally
        self.label = f"{cfg.name} · {setup.model_id}"
        self.earlier_control = earlier_control  # a resumed folder's earlier pause/resume/drain actions
        run_id = UUID(flow_run_id) if flow_run_id else None
        self.control = RunControl(
            out_dir=setup.out_dir,
            model=setup.model_id,
            flow_run_id=run_id,
            server=server_limits_enabled(),  # a real server: the variable, the Paused state
        )
        self.view = LiveView(
            out_dir=setup.out_dir,
            benchmark=cfg.name,
            model=setup.model_id,
            label=self.label,
            total=tally.total,
            results_path=results_path,
            resumed=resumed,
            meter=None if cfg.run.task_runner == "dask" else meter_for(setup.model_id),  # Dask: in its workers
            items_in_flight=in_flight,
            control_mode=lambda: self.control.mode,  # paused / draining while ape ctl holds it
            flow_run_id=run_id,
        )
        # the UI's progress artifact is the live view's, published off the loop's thread
        self.progress = ProgressView(self.label, tally, enabled=cfg.cli.progress, name=setup.model_id, artifact=False)
        self._stack = ExitStack()

    def __enter__(self) -> LiveRun:
        with ExitStack() as stack:
            stack.enter_context(self.progress)
            stack.enter_context(self.view)
            stack.enter_context(self.control)
            if self.setup.model_cfg.batch:  # the batch board's table, on this flow run
                stack.callback(show_batches(self.setup.model_id, BatchArtifact()))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stack.__exit__(*exc)

    @property
    def mode(self) -> Action:
        """``run``, ``pause`` or ``drain``: what the loop does now (read off the hot path)."""
        return self.control.mode

    def saw(self, batch: OutputBatch) -> None:
        """A saved batch: counted, shown in the live view, its errors reported."""
        self.tally.add(batch)
        self.view.add(batch)
        report_errors(batch, self.tally)

    def update(self) -> None:
        """Redraw the progress bar (or log its line)."""
        self.progress.update()

    def hold(self, saver: SaveHandler) -> None:
        """Every session in flight saved and the run paused: note who paused it, then wait
        until it is resumed or drained."""
        saver.note("control", self.control_log())
        saver.flush_metadata()
        self.control.hold(self.tally.done, self.tally.total)

    def note(self, saver: SaveHandler) -> None:
        """At the loop's end: the server's limits this model's calls took (which value held,
        changes seen mid-run) and who paused, resumed or drained, when, what changed."""
        model_cfg = self.setup.model_cfg
        if uses_server_limits(model_cfg):
            saver.note("server_limits", limit_notes(limit_names(model_cfg)))
        if self.control.events or self.earlier_control:
            saver.note("control", self.control_log())

    def control_log(self) -> list[Any]:
        """metadata.json's ``control``: the earlier runs' actions on this folder, then this run's."""
        return self.earlier_control + [e.model_dump(mode="json") for e in self.control.events]
