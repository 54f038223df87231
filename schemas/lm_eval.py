"""One lm-evaluation-harness request as an APE data item (``[task] lm_eval``).

The loader compiles a harness task into a JSON Lines file of these items
(:mod:`ape.tasks.storage.lm_eval_tasks`), one line per document:

- ``id``: ``"<task name>/<doc_id>"``, unique across the subtasks of a group;
- ``task``, ``doc_id``: where the harness's own scoring finds the document again;
- ``context``: the exact prompt the harness builds (few-shot examples included), which
  the pass-through template ``{{context}}`` hands the model unchanged;
- ``until``: the stop sequences; an answer is cut at the first of them before scoring, as
  the harness's own model back ends cut a generation;
- ``generation_kwargs``: the task's other generation arguments, recorded for the reader
  (``max_gen_toks`` and greedy decoding are sent through ``[model]``: see
  :mod:`ape.tasks.storage.lm_eval_requests`);
- ``target``: the task's ``doc_to_target``, shown in transcripts and used by mock models;
- ``doc``: the document itself, as JSON;
- ``choices``, ``gold``: a ``multiple_choice`` task's choices (its ``doc_to_choice``) and the
  gold choice's index (-1 when its target names none), which the run scores as a
  ``[choices]`` run does; empty and None for a ``generate_until`` task.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LmEvalItem(BaseModel):
    """A ``generate_until`` request, or a ``multiple_choice`` task's requests, of one harness document."""

    model_config = ConfigDict(extra="forbid")

    id: str
    task: str
    doc_id: int = Field(ge=0)
    context: str
    until: list[str] = Field(default_factory=list)
    generation_kwargs: dict[str, Any] = Field(default_factory=dict)
    target: str = ""
    doc: dict[str, Any] = Field(default_factory=dict)
    choices: list[str] = Field(default_factory=list)
    gold: int | None = Field(default=None, ge=-1)
