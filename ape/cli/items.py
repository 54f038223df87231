"""``ape items OUTPUT``: the items that mislead (never passed, flaky, changed content)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ape.schemas.errors import ApeError
from ape.tasks.common.inert import terminal_safe

NAME = "items"
HELP = "the items that mislead: never passed, flaky (flip without a change), changed content"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", type=Path, help="output folder holding history/")
    p.add_argument("--top", type=int, default=20, help="how many items to print (default 20)")


def main(args: argparse.Namespace) -> int:
    return items(args.output, args.top)


def items(output: Path, top: int) -> int:
    """Print the item-health table of OUTPUT's history: the worst items with their evidence."""
    from ape.tasks.stats.item_health import health_markdown, item_health
    from ape.tasks.storage.history import history_dir, read_all_items, read_runs

    if not history_dir(output).is_dir():
        raise ApeError(
            "no run history here",
            where=str(output),
            hint="runs started with `ape run --new-run` or by a schedule record one",
        )
    print(terminal_safe(health_markdown(item_health(read_all_items(output), read_runs(output)), top=top)))
    return 0
