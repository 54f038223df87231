"""``ape prune [--dry-run] [--older-than DAYS] OUTPUT``: remove the run folders nothing needs.

Never by itself: a run folder holds a run's transcripts and results, which only its owner can
tell are worth keeping, so nothing is pruned unless this command runs (``ape.prune`` says what
is always kept, and why).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ape.cli.exit_codes import EXIT_OK
from ape.tasks.common.words import human_size

if TYPE_CHECKING:
    from ape.prune import Decision

NAME = "prune"
HELP = "remove the run folders under OUTPUT/runs that nothing needs any more (history, latest, resumable runs)"
DEFAULT_OLDER_THAN_DAYS = 30.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", type=Path, metavar="OUTPUT", help="the output folder holding runs/ and history/")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed and how much, remove nothing")
    p.add_argument(
        "--older-than",
        type=float,
        default=DEFAULT_OLDER_THAN_DAYS,
        metavar="DAYS",
        help=f"only runs started more than DAYS ago (default {DEFAULT_OLDER_THAN_DAYS:g})",
    )


def main(args: argparse.Namespace) -> int:
    return prune(args.output, args.older_than, dry_run=args.dry_run)


def prune(output: Path, older_than_days: float, *, dry_run: bool) -> int:
    """Print each run folder's fate (removed, or kept and why) and the disk given back."""
    from ape import prune as pruning  # deferred: the command line starts without pandas
    from ape.tasks.storage.outdir import OutputLock

    if dry_run:
        return _report(pruning.decide(output, older_than_days), dry_run=True)
    pruning.check_arguments(output, older_than_days)
    with OutputLock(output):  # a writer of the output folder, as a run is: never beside a run going in it
        return _report(pruning.decide(output, older_than_days), dry_run=False)


def _report(decisions: list[Decision], *, dry_run: bool) -> int:
    from ape import prune as pruning  # deferred, as above

    removable = [d for d in decisions if d.keep is None]
    total = sum(d.size for d in removable)
    verb = "would remove" if dry_run else "removed"
    for decision in decisions:
        if decision.keep is None:
            print(f"{decision.run_id}: {verb} ({human_size(decision.size)})")
        else:
            print(f"{decision.run_id}: kept: {decision.keep}")
    if not dry_run:
        pruning.prune(decisions)
    print(
        f"{verb} {len(removable)} of {len(decisions)} run folder(s), {human_size(total)}; "
        "each keeps run.json and its history copies"
    )
    return EXIT_OK
