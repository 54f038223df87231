"""The catalogue of ready-to-run benchmarks: ``ape benchmarks`` lists it, ``ape init`` writes one.

The catalogue is data: ``catalogue.toml`` (one table per benchmark, read into :class:`Entry`:
what it measures, how it is scored, where its format comes from, its Hugging Face dataset)
and ``configs/<name>.toml``, the runnable config ``ape init NAME`` copies, whose one line to
edit is the model's (an OpenAI-compatible endpoint). Their DataModels are in
:mod:`ape.schemas.benchmark_items`, their answer extraction in
:mod:`ape.tasks.solving.benchmark_adapters`.

Whether a benchmark's data is available here is read from the local Hugging Face cache's
folders (:func:`ape.tasks.storage.hf_data.cached`), without a network.
"""

from __future__ import annotations

import importlib.util
import tomllib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ape.schemas.errors import ApeError, shown_path
from ape.tasks.storage.hf_data import cached

__all__ = ["Entry", "availability", "catalogue", "entry", "init_config", "lm_eval_tasks"]


class Entry(BaseModel):
    """One benchmark of the catalogue."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="What `ape init` takes: gsm8k, mmlu, ...")
    title: str
    measures: str = Field(description="What the benchmark measures.")
    scoring: str = Field(description="How an answer is scored and what the score is.")
    format: str = Field(description="Where its prompt and scoring come from (paper, harness).")
    hf_path: str
    hf_name: str | None = None
    hf_split: str = "test"
    local_shape: str = Field(description="The rows' shape, for local files (hf_data_files).")
    logprobs: bool = Field(
        default=False, description="Scored by log-likelihood ([choices]): the endpoint must score prompts."
    )
    extras: list[str] = Field(default_factory=list, description="Extras beyond hf that it needs.")
    lm_eval: str | None = Field(
        default=None,
        description="The lm-evaluation-harness task of the same benchmark: `[task] lm_eval` runs it through APE "
        "with the harness's own prompts and scoring.",
    )


def catalogue() -> list[Entry]:
    """Every benchmark, in the catalogue's order."""
    text = resources.files(__package__).joinpath("catalogue.toml").read_text(encoding="utf-8")
    return [Entry(name=name, **table) for name, table in tomllib.loads(text).items()]


def entry(name: str) -> Entry:
    """The benchmark called ``name``; an ApeError listing close names when there is none."""
    entries = {e.name: e for e in catalogue()}
    found = entries.get(name.strip().lower().replace("-", "_"))
    if found is not None:
        return found
    close = _close_names(name, list(entries))
    shown = ", ".join(close or entries)
    raise ApeError(
        f"no benchmark '{name}' in the catalogue; {'did you mean' if close else 'it has'}: {shown}",
        hint="`ape benchmarks` lists them",
    )


def _close_names(name: str, names: list[str]) -> list[str]:
    import difflib  # noqa: PLC0415 - only for an unknown name

    key = name.strip().lower().replace("-", "_")
    containing = [n for n in names if key and (key in n or n in key)]
    spelled = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    return list(dict.fromkeys([*containing, *spelled]))[:3]


def availability(item: Entry) -> str:
    """``cached`` when the local Hugging Face cache holds the dataset's split, else what is
    needed: ``download`` (a network, or local files through hf_data_files); ``no datasets``
    when the hf extra that reads either is not installed."""
    if importlib.util.find_spec("datasets") is None:
        return "no datasets"
    return "cached" if cached(item.hf_path, item.hf_name, item.hf_split) else "download"


def config_text(name: str) -> str:
    """The config ``ape init NAME`` writes."""
    return resources.files(__package__).joinpath("configs", f"{entry(name).name}.toml").read_text(encoding="utf-8")


def init_config(name: str, folder: Path) -> Path:
    """Write ``<folder>/<name>.toml`` for the benchmark ``name``; never over an existing file."""
    item = entry(name)
    text = config_text(item.name)
    target = Path(folder) / f"{item.name}.toml"
    if target.exists():
        raise ApeError(
            "already exists; nothing was written",
            where=shown_path(target),
            hint="move it away, or give `ape init` another folder",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "x", encoding="utf-8") as handle:  # "x": a file made meanwhile is not overwritten
        handle.write(text)
    return target


def lm_eval_tasks() -> list[str] | None:
    """The task names of the installed lm-evaluation-harness, or None when it is not installed."""
    try:
        from lm_eval.tasks import TaskManager  # noqa: PLC0415 - optional, only for `ape benchmarks --all`
    except ImportError:
        return None
    return sorted(TaskManager().all_tasks)
