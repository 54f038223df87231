"""Resuming after the config changed: what saved results can still be used.

A run records :func:`ape.tasks.setup.model.resume_fingerprints` in metadata.json. When a
later run resumes the same output folder:

- a changed prompt, model, data file or solver/adapter/tool setting would mix
  answers to different questions in one leaderboard: refused with one line, before
  any flow starts (``ape run`` exits 2);
- a larger ``[model] max_tokens`` (and nothing else of the model changed) keeps every
  answer that finished under the smaller budget (a larger budget changes none of them) and
  redoes the items with a session cut at the token limit (TRUNCATED); a smaller or unset
  one is a changed model;
- a changed checker or metric re-scores every saved item: the items are redone, and
  their generations come from the run's cache (``[run] cache``, on by default), so
  no model is called; the grades they replace are kept in ``results.jsonl.bak``;
- a larger ``runs_per_data`` redoes the items that have fewer sessions; the sessions
  they already have come from the cache, so only the missing ones call the model;
- a smaller ``runs_per_data`` keeps the first k sessions of each item (the full file is
  kept beside it as ``results.jsonl.bak``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ape.schemas.errors import ApeError
from ape.schemas.results import Outcome
from ape.tasks.storage.save import SaveHandler

log = logging.getLogger("ape")

PARTS = {"prompt": "prompt", "model": "model", "data": "data file", "solver": "solver, adapter or tool setting"}


def recorded(metadata_path: Path) -> dict[str, Any] | None:
    """The fingerprints a previous run recorded in ``metadata_path`` (None if none)."""
    try:
        meta = json.loads(Path(metadata_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fingerprints = meta.get("fingerprints") if isinstance(meta, dict) else None
    if not isinstance(fingerprints, dict) or not meta.get("completed_ids"):
        return None
    return fingerprints


def refuse_mixing(previous: dict[str, Any] | None, current: dict[str, Any], folder: Path) -> None:
    """ApeError when the saved results in ``folder`` answered different questions."""
    if not previous:
        return
    before = previous.get("generation") or {}
    changed = [label for key, label in PARTS.items() if before.get(key) != current["generation"][key]]
    if "model" in changed and budget_raised(previous, current) is not None:
        changed.remove("model")
    if changed:
        raise ApeError(
            f"{folder} holds results made with a different {', '.join(changed)}; "
            "resuming would mix them into one leaderboard",
            where="[run] output",
            hint="give this run a new output folder (--output), or pass --no-load-save "
            "to start afresh (the old results are kept as .bak files)",
        )


def budget_raised(previous: dict[str, Any], current: dict[str, Any]) -> tuple[int, int] | None:
    """(old, new) ``max_tokens`` when the model changed only by a larger token budget, else None."""
    before, now = previous.get("budget"), current.get("budget")
    if not isinstance(before, dict) or not isinstance(now, dict) or before.get("model") != now.get("model"):
        return None
    old, new = before.get("max_tokens"), now.get("max_tokens")
    if isinstance(old, int) and isinstance(new, int) and new > old:
        return old, new
    return None


def apply_changes(
    saver: SaveHandler, previous: dict[str, Any] | None, current: dict[str, Any], model_id: str, cached: bool
) -> int | None:
    """Bring the loaded results in line with the current config (see the module docstring).
    Returns how many cut items a larger ``max_tokens`` sent back to the model (None when the
    budget did not grow), so a retry of cut items does not say it again."""
    if not previous or not saver.completed:
        return None
    refuse_mixing(previous, current, saver.folder)
    raised = budget_raised(previous, current) if previous.get("generation") != current["generation"] else None
    budget_redone: int | None = None
    if raised is not None:
        budget_redone = saver.discard(saver.ids_with_outcomes({Outcome.TRUNCATED}))
        log.info(
            "%s: [model] max_tokens grew from %d to %d: redoing %d item(s) whose answer was cut at the token limit",
            model_id,
            *raised,
            budget_redone,
        )
    _apply_setting_changes(saver, previous, current, model_id, cached)
    return budget_redone


def retry_lines(
    model_id: str, outcomes: set[Outcome], redone: int, cut: int, budget_redone: int | None, max_tokens: int | None
) -> list[tuple[int, str]]:
    """What ``ape retry --outcomes`` says for one model, one true line (and a warning):
    ``redone`` items had one of ``outcomes``, ``cut`` of them a TRUNCATED session; when a
    larger budget already sent the cut items back (``budget_redone``), that line said it and
    none is repeated here. Cut items asked again with the same budget are cut again: a warning."""
    names = "/".join(sorted(o.value for o in outcomes))
    lines: list[tuple[int, str]] = []
    if redone:
        lines.append((logging.INFO, f"{model_id}: redoing {redone} item(s) with outcome {names}"))
    elif budget_redone is None:
        lines.append((logging.INFO, f"{model_id}: no saved item has outcome {names}: nothing to redo"))
    if cut and budget_redone is None:
        budget = f"the same max_tokens ({max_tokens})" if max_tokens else "the same token budget"
        lines.append(
            (
                logging.WARNING,
                f"{model_id}: {cut} of them were cut at the token limit and are asked again with {budget}: "
                "they will likely be cut again; raise [model] max_tokens to give them room",
            )
        )
    return lines


def _apply_setting_changes(
    saver: SaveHandler, previous: dict[str, Any], current: dict[str, Any], model_id: str, cached: bool
) -> None:
    source = "their cached generations" if cached else "new model calls ([run] cache is off)"
    if previous.get("checker") != current["checker"]:
        count = saver.discard(list(saver.completed))
        log.info("%s: the checker or metric changed: re-scoring %d saved item(s) from %s", model_id, count, source)
        return
    before, now = previous.get("runs_per_data"), current["runs_per_data"]
    if not isinstance(before, int) or before == now:
        return
    if now > before:
        count = saver.discard(saver.ids_with_fewer_sessions(now))
        log.info(
            "%s: runs_per_data grew from %d to %d: running the missing sessions of %d item(s)",
            model_id,
            before,
            now,
            count,
        )
    else:
        backup = saver.keep_first_runs(now)
        log.info(
            "%s: runs_per_data shrank from %d to %d: reporting the first %d session(s) of "
            "each item (all of them kept in %s)",
            model_id,
            before,
            now,
            now,
            backup.name,
        )
