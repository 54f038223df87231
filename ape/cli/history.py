"""``ape history OUTPUT``: each model's score per run with CIs and verdicts; OUTPUT/trend.png."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ape.schemas.errors import ApeError
from ape.tasks.common.inert import terminal_safe
from ape.tasks.storage.file_modes import following

NAME = "history"
HELP = "each model's score per run with CIs and regression verdicts; writes OUTPUT/trend.png"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("output", type=Path, help="output folder holding history/")
    p.add_argument("--model", default=None, help="only this model")
    p.add_argument("--no-chart", action="store_true", help="do not write trend.png")
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="first write history/ again from the run folders (after damage; the old one is kept aside)",
    )


def main(args: argparse.Namespace) -> int:
    with following(args.output):  # trend.png and a rebuilt history: as private as the folder
        return history(args.output, args.model, chart=not args.no_chart, rebuild=args.rebuild)


def history(output: Path, model: str | None, chart: bool, *, rebuild: bool = False) -> int:
    """Print each model's score per run with CIs and verdicts; write OUTPUT/trend.png.
    With ``rebuild``, first write the history again from the run folders."""
    from ape.tasks.report.trend import history_markdown, write_trend_chart
    from ape.tasks.stats.item_health import signal_to_noise, snr_markdown
    from ape.tasks.storage.history import check_history, history_dir, read_runs

    if rebuild:
        rebuild_history(output)
    if not history_dir(output).is_dir():
        raise ApeError(
            "no run history here",
            where=str(output),
            hint="runs started with `ape run --new-run` or by a schedule record one",
        )
    check_history(output)
    runs = read_runs(output)
    if model is not None:
        if model not in set(runs["model_id"]):
            raise ApeError(
                f"no model '{model}' in the history",
                where="--model",
                hint=f"models: {', '.join(sorted(set(runs['model_id'])))}",
            )
        runs = runs[runs["model_id"] == model]
    print(terminal_safe(history_markdown(runs)))
    print(
        "Can the benchmark tell the models apart? (signal: spread of the models' mean scores; "
        "noise: one model's spread across runs with unchanged fingerprints)\n"
    )
    print(terminal_safe(snr_markdown(signal_to_noise(runs))))
    if chart:
        path = write_trend_chart(runs, output / "trend.png")
        log.info("trend chart written to %s", path)
    return 0


def rebuild_history(output: Path) -> None:
    """``ape history OUTPUT --rebuild``: the history written again from the copies its run
    folders keep (ape.tasks.storage.history.rebuild), under the output folder's lock so no
    run records meanwhile; says what was restored, what could not be and where the old one went."""
    from ape.tasks.storage.history import rebuild
    from ape.tasks.storage.outdir import OutputLock

    if not output.is_dir():
        raise ApeError("output folder not found", where=str(output))
    with OutputLock(output):
        done = rebuild(output)
    print(f"rebuilt {output / 'history'}: {len(done.runs)} runs ({done.rows} rows) from {output / 'runs'}")
    if done.kept is not None:
        print(f"  the history it replaced is kept in {done.kept}")
    if done.baseline is not None:
        print(f"  pinned baseline kept: {done.baseline}")
    for run_id, why in done.skipped.items():
        print(f"  left out {run_id}: {why}", file=sys.stderr)
