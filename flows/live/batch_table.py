"""The batch board's table as a markdown artifact keyed ``<model>-batches`` on the flow run
whose sessions asked: one per flow run and model, updated in place.

The board (:mod:`ape.tasks.models.batch.status`) throttles and hands its table over; this
display is what the live run registers for its model (:class:`ape.flows.live.run.LiveRun`),
so the models layer writes nothing to Prefect. A write that fails is the board's debug line.
"""

from __future__ import annotations

import threading
from uuid import UUID

from ape.tasks.models.batch.status import BatchTable
from ape.tasks.storage import prefect_api

__all__ = ["BatchArtifact", "artifact_key_for"]


def artifact_key_for(model_id: str) -> str:
    """The artifact's key: Prefect keys take lowercase letters, digits and dashes."""
    return prefect_api.artifact_key(prefect_api.artifact_key(model_id, fallback="model"), "batches")


class BatchArtifact:
    """Writes each table it is handed on its flow run's artifact (made on the first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flow_run_id: UUID | None = None
        self._artifact_id: UUID | None = None

    def __call__(self, table: BatchTable) -> None:
        with self._lock:
            if table.flow_run_id != self._flow_run_id:  # a new flow run asks: a new artifact
                self._flow_run_id, self._artifact_id = table.flow_run_id, None
            artifact_id = self._artifact_id
        with prefect_api.sync_client() as client:
            made = prefect_api.upsert_artifact(
                client,
                artifact_id,
                key=artifact_key_for(table.model_id),
                kind="markdown",
                data=table.markdown,
                description=f"{table.model_id}: provider batches (id, status, counts, age)",
                flow_run_id=table.flow_run_id,
            )
        if artifact_id is None:
            with self._lock:
                if self._flow_run_id == table.flow_run_id:
                    self._artifact_id = made
