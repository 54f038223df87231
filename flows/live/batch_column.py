"""The progress bar's batch column: the model's oldest waiting provider batch, live.

The bar is redrawn by rich several times a second, but its fields change only when an item
is saved; a run whose sessions wait for a batch saves nothing for a long time. This
column reads the batch board (:func:`ape.tasks.models.batch.status.waiting_text`) at
each redraw, so the terminal shows the batch's id, status, counts and age while it waits,
and nothing for a model that does not batch.
"""

from __future__ import annotations

from rich.progress import ProgressColumn, Task
from rich.text import Text

from ape.tasks.common.inert import terminal_safe
from ape.tasks.models.batch.status import waiting_text

__all__ = ["BatchColumn"]


class BatchColumn(ProgressColumn):
    """The waiting batch of ``model_id`` (empty when none waits)."""

    def __init__(self, model_id: str):
        super().__init__()
        self.model_id = model_id

    def render(self, task: Task) -> Text:
        text = waiting_text(self.model_id)
        return Text(terminal_safe(text), style="yellow") if text else Text("")
