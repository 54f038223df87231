"""``ape baseline OUTPUT RUN_ID``: pin the run new runs are compared with."""

from __future__ import annotations

import argparse
from pathlib import Path

from ape.tasks.storage.file_modes import following
from ape.tasks.storage.history import set_baseline

NAME = "baseline"
HELP = "pin a run as the baseline new runs are compared with"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", type=Path, help="output folder holding history/")
    p.add_argument("run_id", help="a run id from `ape history`, or 'latest'")


def main(args: argparse.Namespace) -> int:
    with following(args.output):  # history/baseline.json: as private as the folder
        return baseline(args.output, args.run_id)


def baseline(output: Path, run_id: str) -> int:
    pinned = set_baseline(output, run_id)
    print(f"baseline: {pinned} (every new run is now also compared with it)")
    return 0
