"""The command line: ``ape run|validate|report|retry|demo|serve|server|history|baseline|diff|items|schema``.

Errors print one line naming the file and key (``--debug`` adds the
traceback) and exit non-zero: 2 for bad input, 1 for a run whose items
failed, 3 for a regression under ``--fail-on-regression``, 0 on success.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ape.schemas.errors import ApeError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_REGRESSED = 0, 1, 2, 3
COMMANDS = (
    "run",
    "validate",
    "report",
    "retry",
    "demo",
    "serve",
    "server",
    "plan",
    "history",
    "baseline",
    "diff",
    "items",
    "schema",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ape",
        description="APE: evaluate language models on your own benchmarks, orchestrated by Prefect. "
        "`python -m ape config.toml` is the same as `ape run config.toml`.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a benchmark from a TOML config")
    run.add_argument("config", type=Path, help="path to the config .toml")
    _run_options(run)
    _recurring_options(run)

    val = sub.add_parser("validate", help="check a config, its plugins, data and template; calls no model")
    val.add_argument("config", type=Path)
    val.add_argument(
        "--estimate", action="store_true", help="also estimate tokens and cost from the prompt lengths and max_tokens"
    )
    val.add_argument(
        "--output", type=Path, default=None, help="check this output folder instead of [run] output (as run --output)"
    )

    pln = sub.add_parser(
        "plan",
        help="items and runs_per_data needed to detect a difference "
        "between two models at 80%% power (from earlier runs when there are some)",
    )
    pln.add_argument("config", type=Path)
    pln.add_argument(
        "--difference",
        type=float,
        required=True,
        help="the smallest difference in mean score worth detecting, e.g. 0.03",
    )
    pln.add_argument(
        "--output",
        type=Path,
        default=None,
        help="earlier runs to measure variances from (default: the config's output)",
    )

    rep = sub.add_parser(
        "report",
        help="rebuild leaderboard, calibration, Parquet, JSON and chart "
        "from saved results of one or more runs (no model calls)",
    )
    rep.add_argument("outputs", type=Path, nargs="+", help="output folders of earlier runs")
    rep.add_argument(
        "--out", type=Path, default=None, help="where to write the report (default: the first output folder)"
    )

    ret = sub.add_parser(
        "retry",
        help="re-run only the items that ended ERROR (or other outcomes) in an output folder, then rebuild the report",
    )
    ret.add_argument(
        "folder", metavar="OUTPUT", type=Path, help="output folder of an earlier run, or one model's folder in it"
    )
    ret.add_argument(
        "--outcomes",
        default="ERROR",
        help="comma-separated outcomes to redo: ERROR, PARSING_FAILED, GAVE_UP, SOLVED (default: ERROR)",
    )
    ret.add_argument(
        "--config", type=Path, default=None, help="config to use (default: the one recorded in the run's metadata file)"
    )
    _run_options(ret, output=False)

    demo = sub.add_parser("demo", help="run the mock adapters over the ten-task fixture (the eval demo)")
    demo.add_argument("--out", type=Path, default=Path("output/demo"), help="output folder")
    demo.add_argument("--sequential", action="store_true", help="run tasks in a fixed order")

    serve = sub.add_parser("serve", help="serve the benchmark as a scheduled Prefect deployment")
    serve.add_argument("config", type=Path)
    serve.add_argument("--cron", default=None, help='schedule, e.g. "0 3 * * *" (none: manual runs)')
    serve.add_argument(
        "--timezone", default=None, help='IANA timezone of the schedule, e.g. "Europe/Berlin" (default UTC)'
    )
    serve.add_argument("--name", default=None, help="deployment name (default: the benchmark name)")
    serve.add_argument(
        "--interval",
        type=float,
        default=None,
        help="schedule: a run every this many seconds (instead of, or besides, --cron)",
    )

    srv = sub.add_parser("server", help="manage the local Prefect server (UI) that runs use by default")
    srv.add_argument(
        "action",
        choices=("start", "stop", "status", "env"),
        help="env: print the PREFECT_API_URL export line for a new shell",
    )
    srv.add_argument("--port", type=int, default=None, help="port (default 4200)")
    schema = sub.add_parser(
        "schema", help="write the JSON Schema of config.toml, for editors that read a '#:schema PATH' line"
    )
    schema.add_argument("--output", type=Path, default=None, help="file to write (default: print it)")
    hist, base, items = _history_commands(sub)
    dif = _diff_command(sub)
    for command in (
        run,
        val,
        rep,
        ret,
        demo,
        serve,
        srv,
        pln,
        hist,
        base,
        dif,
        items,
        schema,
    ):  # --debug also after the command
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and debug logs"
        )
    return parser


def _run_options(p: argparse.ArgumentParser, *, output: bool = True) -> None:
    if output:
        p.add_argument("--output", type=Path, default=None, help="output folder (overrides [run] output)")
    p.add_argument("--workers", type=int, default=None, help="solver workers (overrides [run] solver_workers)")
    p.add_argument(
        "--no-load-save", action="store_true", help="start afresh instead of resuming from the saved results"
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--no-server",
        action="store_true",
        help="do not start a local Prefect server; use PREFECT_API_URL or Prefect's "
        "temporary server (which keeps no history)",
    )


def _recurring_options(p: argparse.ArgumentParser) -> None:
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


def _history_commands(sub: argparse._SubParsersAction) -> tuple[argparse.ArgumentParser, ...]:
    hist = sub.add_parser(
        "history", help="each model's score per run with CIs and regression verdicts; writes OUTPUT/trend.png"
    )
    hist.add_argument("output", type=Path, help="output folder holding history/")
    hist.add_argument("--model", default=None, help="only this model")
    hist.add_argument("--no-chart", action="store_true", help="do not write trend.png")
    hist.add_argument(
        "--rebuild",
        action="store_true",
        help="first write history/ again from the run folders (after damage; the old one is kept aside)",
    )
    base = sub.add_parser("baseline", help="pin a run as the baseline new runs are compared with")
    base.add_argument("output", type=Path, help="output folder holding history/")
    base.add_argument("run_id", help="a run id from `ape history`, or 'latest'")
    items = sub.add_parser(
        "items", help="the items that mislead: never passed, flaky (flip without a change), changed content"
    )
    items.add_argument("output", type=Path, help="output folder holding history/")
    items.add_argument("--top", type=int, default=20, help="how many items to print (default 20)")
    return hist, base, items


def _diff_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    diff = sub.add_parser(
        "diff",
        help="compare two runs item by item (flipped items, largest changes, what changed); writes diff.md",
    )
    diff.add_argument(
        "paths", type=Path, nargs="+", help="DIR_A DIR_B, or OUTPUT RUN_A RUN_B (run ids, latest, previous)"
    )
    diff.add_argument(
        "--out", type=Path, default=None, help="folder for diff.md and diff.parquet (default: the later side)"
    )
    diff.add_argument(
        "--no-rescore", action="store_true", help="compare saved scores even when the checker changed between the runs"
    )
    return diff


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `python -m ape config.toml` is shorthand for `ape run config.toml`
    first = next((a for a in args_list if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS:
        args_list.insert(args_list.index(first), "run")
    parser = _parser()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    _setup_logging(args.debug)
    try:
        return _dispatch(args)
    except ApeError as exc:
        if args.debug:
            logging.getLogger("ape").exception("error")
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(_interrupted_line(args.command), file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_FAILED


def _interrupted_line(command: str) -> str:
    """What Ctrl-C left behind: "finished items are saved" only once a run's flow had
    started; before that (config, canary, server start) nothing was saved or begun."""
    commands = sys.modules.get("ape.commands")
    if commands is not None and commands.work_started():
        return "interrupted: finished items are saved; run the same command again to resume"
    if command in ("run", "retry"):
        return "interrupted before any item started; nothing was saved"
    return "interrupted"


class _Terminal(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (it may be replaced after set-up)."""

    @property
    def stream(self):  # noqa: D401
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _setup_logging(debug: bool) -> None:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Prefect's own INFO chatter (one line per task run) would drown the progress bar and
    # costs CPU per task run; users can lower it again with PREFECT_LOGGING_LEVEL.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "DEBUG" if debug else "WARNING")
    logger = logging.getLogger("ape")
    if not any(isinstance(h, _Terminal) for h in logger.handlers):
        handler = _Terminal()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(lambda record: not getattr(record, "ape_console_skip", False))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False


def _overrides(args: argparse.Namespace) -> dict[str, str | int | bool]:
    out: dict[str, str | int | bool] = {}
    if getattr(args, "output", None) is not None:
        out["run.output"] = str(args.output.resolve())
    if getattr(args, "workers", None) is not None:
        out["run.solver_workers"] = args.workers
    if getattr(args, "no_load_save", False):
        out["run.load_save"] = False
    if getattr(args, "no_progress", False):
        out["cli.progress"] = False
    return out


def _dispatch(args: argparse.Namespace) -> int:
    from ape import commands

    if args.command == "run":
        return commands.run(
            args.config,
            _overrides(args),
            use_server=not args.no_server,
            new_run=args.new_run,
            fail_on_regression=args.fail_on_regression,
        )
    if args.command == "validate":
        return commands.validate(args.config, estimate=args.estimate, overrides=_overrides(args))
    if args.command == "plan":
        return commands.plan(args.config, args.difference, args.output)
    if args.command == "report":
        return commands.report(args.outputs, args.out)
    if args.command == "retry":
        return commands.retry(args.folder, args.outcomes, args.config, _overrides(args), use_server=not args.no_server)
    if args.command == "demo":
        return commands.demo(args.out, parallel=not args.sequential)
    if args.command == "serve":
        return commands.serve(
            args.config, args.cron, args.name, timezone=args.timezone, interval=getattr(args, "interval", None)
        )
    if args.command == "history":
        return commands.history(args.output, args.model, chart=not args.no_chart, rebuild=args.rebuild)
    if args.command == "items":
        return commands.items(args.output, args.top)
    if args.command == "diff":
        from ape.diffs import diff

        return diff(args.paths, args.out, rescore=not args.no_rescore)
    if args.command == "baseline":
        return commands.baseline(args.output, args.run_id)
    if args.command == "server":
        return commands.server(args.action, args.port)
    if args.command == "schema":
        return commands.schema(args.output)
    raise AssertionError(args.command)


if __name__ == "__main__":
    raise SystemExit(main())
