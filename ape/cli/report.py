"""``ape report OUTPUT...``: the report rebuilt from saved results (no model calls)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ape.schemas.errors import ApeError
from ape.tasks.common.inert import terminal_safe
from ape.tasks.storage.file_modes import following
from ape.tasks.storage.run_files import metadata_near

NAME = "report"
HELP = (
    "rebuild leaderboard, calibration, Parquet, JSON and chart from saved results of one or more runs (no model calls)"
)

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("outputs", type=Path, nargs="+", help="output folders of earlier runs")
    p.add_argument(
        "--out", type=Path, default=None, help="where to write the report (default: the first output folder)"
    )


def main(args: argparse.Namespace) -> int:
    return report(args.outputs, args.out)


def report(outputs: list[Path], out: Path | None) -> int:
    from ape.tasks.report.build import build_report  # deferred: pandas and pyarrow (CLI start-up)
    from ape.tasks.report.markdown import markdown_table

    for folder in outputs:
        if not folder.is_dir():
            raise ApeError("output folder not found", where=str(folder))
    benchmarks = _benchmarks_of(outputs)
    if len(benchmarks) > 1:
        named = "; ".join(
            f"{name}: {', '.join(str(f) for f in folders)}" for name, folders in sorted(benchmarks.items())
        )
        raise ApeError(
            f"these outputs hold different benchmarks ({named}); a leaderboard ranks models on the same items only",
            where="ape report",
            hint="report each benchmark on its own",
        )
    target = out or outputs[0]
    with following(target):  # as private (or as shared) as the folder it writes into
        envelope = build_report(list(outputs), target)
    print(terminal_safe(markdown_table(envelope)))
    log.info("report written to %s", target)
    return 0 if envelope.error is None else 1


def _benchmarks_of(outputs: list[Path]) -> dict[str, list[Path]]:
    """The benchmark name recorded in each folder's run metadata (its own or its models')."""
    found: dict[str, list[Path]] = {}
    for folder in outputs:
        for _, data in metadata_near(folder):
            name = data.get("benchmark")
            if name:
                found.setdefault(str(name), [])
                if folder not in found[str(name)]:
                    found[str(name)].append(folder)
    return found
