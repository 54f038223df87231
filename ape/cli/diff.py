"""``ape diff``: two runs compared item by item; the work is :func:`ape.diffs.diff`."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "diff"
HELP = "compare two runs item by item (flipped items, largest changes, what changed); writes diff.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", type=Path, nargs="+", help="DIR_A DIR_B, or OUTPUT RUN_A RUN_B (run ids, latest, previous)")
    p.add_argument(
        "--out", type=Path, default=None, help="folder for diff.md and diff.parquet (default: the later side)"
    )
    p.add_argument(
        "--no-rescore", action="store_true", help="compare saved scores even when the checker changed between the runs"
    )


def main(args: argparse.Namespace) -> int:
    from ape.diffs import diff  # deferred: pandas and the re-scoring flows (CLI start-up)
    from ape.tasks.storage.file_modes import following

    # the diff is written beside the runs: as private (or as shared) as their folder
    with following(args.out or args.paths[0]):
        return diff(args.paths, args.out, rescore=not args.no_rescore)
