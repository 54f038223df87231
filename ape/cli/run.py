"""``ape run CONFIG``: run a benchmark, print its leaderboard, exit with its outcome."""

from __future__ import annotations

import argparse
from pathlib import Path

from ape.cli.exit_codes import EXIT_REGRESSED
from ape.cli.options import add_run_options, finish, overrides
from ape.tasks.storage.config_file import load_config

NAME = "run"
HELP = "run a benchmark from a TOML config"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="path to the config .toml")
    add_run_options(p)
    p.add_argument(
        "--new-run",
        action="store_true",
        help="measure afresh in a new run folder OUTPUT/runs/<run id> (as scheduled runs do), "
        "add it to OUTPUT/history and compare it with the previous run and the baseline",
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=f"exit with code {EXIT_REGRESSED} when a model regressed (for CI gates)",
    )


def main(args: argparse.Namespace) -> int:
    return run(
        args.config,
        overrides(args),
        use_server=not args.no_server,
        new_run=args.new_run,
        fail_on_regression=args.fail_on_regression,
    )


def run(
    config_path: Path,
    overrides: dict,
    *,
    use_server: bool = True,
    new_run: bool = False,
    fail_on_regression: bool = False,
) -> int:
    from ape.launch import RunRequest, launch  # deferred: Prefect and the flows (CLI start-up)

    config = load_config(config_path, overrides)
    state = launch(config, RunRequest(new_run=new_run), api="start" if use_server else "configured")
    return finish(config, state, new_run=new_run, fail_on_regression=fail_on_regression)
