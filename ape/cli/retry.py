"""``ape retry OUTPUT``: redo only the items that ended ERROR (or other outcomes), then the report."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ape.cli.options import add_run_options, finish, overrides
from ape.schemas.config import slug
from ape.schemas.errors import ApeError
from ape.schemas.results import Outcome
from ape.tasks.storage.config_file import load_config
from ape.tasks.storage.run_files import metadata_near, recorded_config_file
from ape.tasks.storage.runs import run_folder, split_run_folder

NAME = "retry"
HELP = "re-run only the items that ended ERROR (or other outcomes) in an output folder, then rebuild the report"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "folder", metavar="OUTPUT", type=Path, help="output folder of an earlier run, or one model's folder in it"
    )
    p.add_argument(
        "--outcomes",
        "--outcome",
        default="ERROR",
        help="comma-separated outcomes to redo: "
        + ", ".join(o.value for o in Outcome)
        + " (default: ERROR; TRUNCATED after raising [model] max_tokens)",
    )
    p.add_argument(
        "--config", type=Path, default=None, help="config to use (default: the one recorded in the run's metadata file)"
    )
    add_run_options(p, output=False)


def main(args: argparse.Namespace) -> int:
    return retry(args.folder, args.outcomes, args.config, overrides(args), use_server=not args.no_server)


def retry(output: Path, outcomes: str, config_path: Path | None, overrides: dict, *, use_server: bool = True) -> int:
    from ape.launch import RunRequest, launch  # deferred: Prefect and the flows (CLI start-up)

    if not output.is_dir():
        raise ApeError("output folder not found", where=str(output))
    wanted = [o.strip().upper() for o in outcomes.split(",") if o.strip()]
    valid = [o.value for o in Outcome]
    for name in wanted:
        if name not in valid:
            raise ApeError(f"unknown outcome '{name}'", where="--outcomes", hint=f"use {', '.join(valid)}")
    recorded, top, models = _recorded_config(output) if config_path is None else (config_path, output, None)
    top, run_id = split_run_folder(top)  # a run folder continues that run
    overrides = {"run.output": str(top.resolve()), **overrides, "run.load_save": True}
    config = load_config(recorded, overrides)
    if models:
        log.info("retrying model %s of %s (the other models' results stay as they are)", ", ".join(models), top)
    request = RunRequest(redo_outcomes=wanted, only_models=models, run_id=run_id)
    state = launch(config, request, api="start" if use_server else "configured")
    continued = run_folder(top, run_id) if run_id is not None else None
    return finish(config, state, new_run=run_id is not None, run_folder=continued)


def _recorded_config(output: Path) -> tuple[Path, Path, list[str] | None]:
    """(config file, top output folder, models to redo) recorded by an earlier run in
    ``output``: the benchmark's folder (every model), or one model's folder of a
    several-model benchmark (that model only). The run's metadata file is found by its
    content, whatever ``[run] metadata_file`` called it (see ape.tasks.storage.run_files)."""
    for meta, data in metadata_near(output):
        config_file = recorded_config_file(meta.parent, data)  # beside a copied or moved folder first
        if config_file is None:
            continue
        if meta.parent != output or not data.get("model"):
            return config_file, output, None
        # one model's folder of a several-model benchmark: <output>/<slug of the model id>
        try:
            several = len(load_config(config_file).model) > 1
        except ApeError:
            several = False
        if several and output.name == slug(str(data["model"])):
            return config_file, output.parent, [str(data["model"])]
        return config_file, output, None
    raise ApeError(
        "no run metadata with a recorded config found here or in its sub-folders",
        where=str(output),
        hint="pass the output folder of an earlier run, or --config CONFIG.toml",
    )
