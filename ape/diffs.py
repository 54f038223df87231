"""``ape diff``: two runs compared item by item, with what changed between them.

``ape diff DIR_A DIR_B`` compares two output folders (or run folders);
``ape diff OUTPUT RUN_A RUN_B`` two runs of ``OUTPUT/runs`` by id (``latest`` and
``previous`` name the last two). The tables come from :mod:`ape.tasks.report.diff`; a
model whose checker differs between the runs has the earlier run's saved answers re-scored
with the later run's checker first (:mod:`ape.tasks.after_run.rescore`), and the diff says so.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ape.config import load_config
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.tasks.after_run.rescore import rescore as rescore_sessions
from ape.tasks.common.inert import terminal_safe
from ape.tasks.report.diff import FAIL_TO_PASS, PASS_TO_FAIL, changed_settings, compare_items, diff_markdown, write_diff
from ape.tasks.report.sessions_table import load_sessions
from ape.tasks.storage.run_files import metadata_by_model
from ape.tasks.storage.runs import run_folder, runs_root

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("ape")


def _run_ids(output: Path) -> list[str]:

    root = runs_root(output)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def resolve_sides(paths: list[Path]) -> list[tuple[str, Path]]:
    """(label, folder) of both sides, from two folders or an output folder and two run ids."""

    if len(paths) == 2:
        for path in paths:
            if not path.is_dir():
                raise ApeError("not a folder", where=str(path), hint="give two output folders, or OUTPUT RUN_A RUN_B")
        names = [path.name for path in paths]
        if names[0] == names[1]:  # a/out and b/out: name them by their parents too
            names = [f"{path.parent.name}/{path.name}" for path in paths]
        return list(zip(names, paths))
    if len(paths) != 3:
        raise ApeError("ape diff takes two folders or an output folder and two run ids", where="ape diff")
    output, ids = paths[0], _run_ids(paths[0])
    if not ids:
        raise ApeError("no runs here", where=str(output), hint="runs started with `ape run --new-run` make them")
    sides = []
    for given in (str(paths[1]), str(paths[2])):
        named = {"latest": ids[-1], "previous": ids[-2] if len(ids) > 1 else None}.get(given, given)
        if named is None or named not in ids:
            hint = f"runs: {', '.join(ids[-5:])}, latest, previous"
            raise ApeError(f"no run '{given}'", where=str(output), hint=hint)
        sides.append((named, run_folder(output, named)))
    return sides


def config_of(metadata: dict, where: str) -> ApeConfig:
    """The config a run recorded in its metadata (``config_file``), loaded afresh."""

    path = metadata.get("config_file")
    if not path or not Path(path).is_file():
        raise ApeError(
            "the run does not name a config file that still exists, so its checker cannot be rebuilt",
            where=where,
            hint="compare the saved scores with --no-rescore",
        )
    return load_config(Path(path))


def _models(sessions: pd.DataFrame, metadata: dict[str, dict]) -> set[str]:
    """The models a run holds: those with saved sessions, and those its metadata names."""
    held = set(sessions["model_id"].astype(str)) if "model_id" in sessions.columns else set()
    return held | {str(m) for m in metadata}


Side = tuple[str, Path, "pd.DataFrame", dict[str, dict]]  # label, folder, sessions, metadata by model


def refuse_unrelated(items: pd.DataFrame, a: Side, b: Side) -> None:
    """ApeError (exit 2, nothing written) when the runs share no model, or no item of a model
    they share: such runs are of different benchmarks, and a diff of them would report
    every item as new and nothing else."""
    shared = int((items["sessions_a"].notna() & items["sessions_b"].notna()).sum()) if not items.empty else 0
    if shared:
        return
    (label_a, folder_a, sessions_a, meta_a), (label_b, folder_b, sessions_b, meta_b) = a, b
    models_a, models_b = _models(sessions_a, meta_a), _models(sessions_b, meta_b)
    what = "no model in common" if not models_a & models_b else "no item in common"
    names = [_benchmark(meta_a), _benchmark(meta_b)]
    held = f"{label_a}: {_listed(models_a)}; {label_b}: {_listed(models_b)}"
    if names[0] and names[1] and names[0] != names[1]:
        held = f"benchmark '{names[0]}' vs '{names[1]}'; {held}"
    raise ApeError(
        f"the two runs hold {what} ({held}), so there is nothing to compare item by item",
        where=f"ape diff {folder_a} {folder_b}",
        hint="diff two runs of the same benchmark (`ape diff OUTPUT previous latest`); nothing was written",
    )


def _benchmark(metadata: dict[str, dict]) -> str | None:
    names = {str(m["benchmark"]) for m in metadata.values() if isinstance(m, dict) and m.get("benchmark")}
    return ", ".join(sorted(names)) or None


def _listed(models: set[str]) -> str:
    return "models " + ", ".join(sorted(models)) if models else "no saved results"


def diff(paths: list[Path], out: Path | None = None, *, rescore: bool = True) -> int:
    """Print the diff and write diff.md and diff.parquet (into ``out``, else the later side)."""

    (label_a, folder_a), (label_b, folder_b) = resolve_sides(paths)
    meta_a, meta_b = metadata_by_model([folder_a]), metadata_by_model([folder_b])
    sessions_a, sessions_b = load_sessions([folder_a]), load_sessions([folder_b])
    notes = []
    for model_id in sorted(set(meta_a) & set(meta_b)):
        checker_a = (meta_a[model_id].get("fingerprints") or {}).get("checker")
        checker_b = (meta_b[model_id].get("fingerprints") or {}).get("checker")
        if rescore and checker_a and checker_b and checker_a != checker_b:
            config = config_of(meta_b[model_id], where=f"{folder_b} ({model_id})")
            sessions_a = rescore_sessions(sessions_a, config, model_id)
            notes.append(
                f"{model_id}: the checker changed; {label_a}'s saved answers were re-scored with "
                f"{label_b}'s checker (no model calls), so both sides are graded alike."
            )
    items = compare_items(sessions_a, sessions_b)
    refuse_unrelated(items, (label_a, folder_a, sessions_a, meta_a), (label_b, folder_b, sessions_b, meta_b))
    models_a, models_b = _models(sessions_a, meta_a), _models(sessions_b, meta_b)
    only = (sorted(models_a - models_b), sorted(models_b - models_a))
    markdown = diff_markdown(items, changed_settings(meta_a, meta_b), label_a, label_b, only_models=only)
    if notes:
        markdown += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    print(terminal_safe(markdown))
    md, parquet = write_diff(out or folder_b, items, markdown)
    down, up = int((items["flip"] == PASS_TO_FAIL).sum()), int((items["flip"] == FAIL_TO_PASS).sum())
    log.info("%d items went from pass to fail, %d from fail to pass; written to %s and %s", down, up, md, parquet)
    return 0
