"""``ape plan CONFIG --difference D``: items and runs needed to detect a difference at 80% power."""

from __future__ import annotations

import argparse
from pathlib import Path

from ape.schemas.errors import ApeError
from ape.tasks.storage.config_file import load_config

NAME = "plan"
HELP = (
    "items and runs_per_data needed to detect a difference "
    "between two models at 80%% power (from earlier runs when there are some)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path)
    p.add_argument(
        "--difference",
        type=float,
        required=True,
        help="the smallest difference in mean score worth detecting, e.g. 0.03",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help="earlier runs to measure variances from (default: the config's output)",
    )


def main(args: argparse.Namespace) -> int:
    return plan(args.config, args.difference, args.output)


def plan(config_path: Path, difference: float, output: Path | None = None) -> int:
    """``ape plan``: items and runs needed to detect ``difference`` at 80% power."""
    from ape.flows.preflight import preflight  # deferred: the plugins and Prefect (CLI start-up)
    from ape.tasks.report.sessions_table import session_table
    from ape.tasks.stats.power import ASSUMED, plan_table, variance_from_sessions
    from ape.tasks.storage.run_files import find_runs

    if not 0 < difference < 1:
        raise ApeError(
            f"--difference must be between 0 and 1, got {difference}",
            where="--difference",
            hint="a difference in mean score, e.g. 0.03 for three points",
        )
    config = load_config(config_path)
    ids = preflight(config).ids
    variance = ASSUMED
    output = Path(output or config.run.output)
    runs = find_runs([output]) if output.is_dir() else []
    if runs:
        variance = variance_from_sessions(session_table(runs, str(output)).to_pandas())
    rows = plan_table(difference, variance, len(ids))
    print(
        f"To detect a difference of {difference:g} in mean score between two models (paired, two-sided 5%, 80% power):"
    )
    print(f"  variances: {variance.source}")
    print(
        f"    between items {variance.between_a:.4f} / {variance.between_b:.4f}, "
        f"within an item (per run) {variance.within_a:.4f} / {variance.within_b:.4f}, "
        f"correlation {variance.correlation:.2f}"
    )
    print(
        f"  {'runs_per_data':>13}  {'items needed':>12}  {'sessions/model':>14}  "
        f"{'detectable with the ' + str(len(ids)) + ' items':>30}"
    )
    for row in rows:
        mark = "  <- more items than the data has" if row.items > len(ids) else ""
        print(
            f"  {row.runs_per_data:>13}  {row.items:>12,}  {row.sessions_per_model:>14,}  "
            f"{row.detectable_with_data:>30.4f}{mark}"
        )
    return 0
