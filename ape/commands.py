"""What each ``ape`` subcommand does; ``ape.cli`` only parses arguments."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ape.api import canary, preflight
from ape.cli import EXIT_REGRESSED
from ape.config import load_config, locate
from ape.schemas.config import ApeConfig, slug
from ape.schemas.errors import ApeError
from ape.schemas.models import ModelAdapter
from ape.schemas.results import Outcome

log = logging.getLogger("ape")
_WORK_STARTED = False  # set once a run's benchmark flow starts: from then on items may be saved


def work_started() -> bool:
    """Whether a run's benchmark flow has started in this process (what Ctrl-C tells the user)."""
    return _WORK_STARTED


def _use_prefect_server(use_server: bool) -> str | None:
    """Make runs visible in a Prefect UI that keeps their history (see ape.server); the API URL."""
    if not use_server:
        return None
    from ape.server import ensure_api_url

    return ensure_api_url(on_status=log.info)


def run_hint(api_url: str, flow_name: str, name: str, *, ape_server: bool = False) -> list[str]:
    """How to trigger a served deployment from a new shell, which needs the API URL (and,
    for APE's own server, its credentials, which ``ape server env`` prints without showing
    them here): without it ``prefect deployment run`` looks for a temporary in-process
    server and times out."""
    from ape.server import env_line

    target = shlex.quote(f"{flow_name}/{name}")
    point = 'eval "$(ape server env)"' if ape_server else env_line(api_url)
    return ["To start a run from another shell:", f"    {point}", f"    prefect deployment run {target}"]


def _log_level(config: ApeConfig) -> None:
    """``[cli] log_level`` sets what the terminal and run.log show; ``--debug`` wins."""
    logger = logging.getLogger("ape")
    if logger.level != logging.DEBUG:
        logger.setLevel(config.cli.log_level)


def _cache_storage(config: ApeConfig) -> None:
    # Cached generations live next to the results they belong to, unless the user chose a
    # Prefect result storage location themselves. Must be set before Prefect is imported.
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(config.run.output / ".cache" / "results"))


def _output_lock(config: ApeConfig) -> Any:
    """The output folder's lock (re-entrant: the flow takes it again; see ape.tasks.storage.outdir)."""
    from ape.tasks.storage.outdir import OutputLock

    return OutputLock(config.run.output)


def _run_flow(
    config: ApeConfig,
    redo_outcomes: list[str] | None = None,
    only_models: list[str] | None = None,
    *,
    new_run: bool | None = None,
    run_id: str | None = None,
    fail_on_regression: bool = False,
) -> int:
    """The benchmark flow, watching the Prefect API. The caller holds the output folder's
    lock (:func:`_output_lock`), taken before a server starts so a second run is refused at once."""
    from contextlib import nullcontext

    from ape.flows.logs import quiet_prefect_console
    from ape.watchdog import api_watchdog

    global _WORK_STARTED
    _WORK_STARTED = True
    if not log.isEnabledFor(logging.DEBUG):  # --debug keeps Prefect's tracebacks
        quiet_prefect_console()
    watchdog = api_watchdog(config.run.output)
    with watchdog if watchdog is not None else nullcontext():
        return _run_benchmark(
            config, redo_outcomes, only_models, new_run=new_run, run_id=run_id, fail_on_regression=fail_on_regression
        )


def _run_benchmark(
    config: ApeConfig,
    redo_outcomes: list[str] | None,
    only_models: list[str] | None = None,
    *,
    new_run: bool | None = None,
    run_id: str | None = None,
    fail_on_regression: bool = False,
) -> int:
    from ape.flows.benchmark import benchmark
    from ape.flows.states import items_failed
    from ape.tasks.storage.save import SaveFailed

    if config.run.task_runner == "dask":
        from ape.flows.feeders import dask_task_runner

        try:
            dask_task_runner(config)  # a clear error now, rather than a failed flow run
        except ApeError as exc:
            raise locate(exc, config) from None
    state = benchmark(
        config, redo_outcomes=redo_outcomes, only_models=only_models, new_run=new_run, run_id=run_id, return_state=True
    )
    output = _run_output(config, state, bool(new_run or run_id))
    report = output / "leaderboard.md"
    if report.exists():
        print(report.read_text(encoding="utf-8"))
    try:
        failed = items_failed(state)
    except SaveFailed as exc:  # the disk filled up: what was saved stays, one line
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if failed is None:
        log.info("outputs in %s (report.json, leaderboard.parquet, summary.png, sessions.jsonl, ...)", output)
        return _regression_exit(state.result(), fail_on_regression)
    print(f"error: {failed}", file=sys.stderr)
    from ape.flows.benchmark import ResultsSuspect

    if not isinstance(failed, ResultsSuspect):
        print("       `ape retry " + str(output) + "` redoes only the failed items", file=sys.stderr)
    return 1


def _run_output(config: ApeConfig, state: Any, new_run: bool) -> Path:
    """The folder this run wrote: the output folder, or its run folder for a new run."""
    if not new_run:
        return config.run.output
    from ape.tasks.storage.runs import find_by_flow_run

    return find_by_flow_run(config.run.output, str(state.state_details.flow_run_id)) or config.run.output


def _regression_exit(result: Any, fail_on_regression: bool) -> int:
    regressed = [r for r in (result or {}).get("regressions") or [] if r["verdict"] == "regressed"]
    for row in regressed:
        if row["against"] == "history":
            where = f"its history ({row['reference_runs']} runs up to {row['reference_run_id']})"
            evidence = row.get("evidence") or ""
        else:
            where = f"its {row['against']} run {row['reference_run_id']}"
            evidence = f"p={row['p_value']:.3g}"
        print(
            f"regression: {row['model_id']} against {where}: score {row['mean_diff']:+.3f}, {evidence}", file=sys.stderr
        )
    return EXIT_REGRESSED if regressed and fail_on_regression else 0


def run(
    config_path: Path,
    overrides: dict,
    *,
    use_server: bool = True,
    new_run: bool = False,
    fail_on_regression: bool = False,
) -> int:
    config = load_config(config_path, overrides)
    _log_level(config)
    preflight(config)
    _cache_storage(config)
    with _output_lock(config):  # before a server start, so a second run is refused at once
        checked = _canary(config)
        _use_prefect_server(use_server)
        with checked:
            return _run_flow(config, new_run=new_run, fail_on_regression=fail_on_regression)


def _canary(config: ApeConfig) -> Any:
    """Grade the checker's known answers before a server starts or a model is called
    (``ape.tasks.checking.canary``); the returned context tells the flow not to grade them again."""
    from ape.tasks.checking.canary import passed

    graded = canary(config)
    if graded:
        log.info("canary: the checker graded %d known answers as expected", len(graded))
    return passed(config.checker)


def validate(config_path: Path, *, estimate: bool = False, overrides: dict | None = None) -> int:
    """``ape validate``: everything a run checks before its first model call; ``overrides``
    are the dotted keys of command-line flags (``--output``), as for ``ape run``."""
    from ape.tasks.solving.render import template_variables

    config = load_config(config_path, overrides)
    plan, tools, ids = preflight(config)
    graded = canary(config)  # before "ok": a checker that cannot grade is not a valid config
    variables = ", ".join(sorted(template_variables(plan.template))) or "none"
    print(f"ok: {config_path}")
    print(f"  data: {len(ids)} items from {config.data.file.name}" + (f" ({ids[0]} .. {ids[-1]})" if ids else ""))
    print(f"  template variables: {variables}")
    print(f"  models: {', '.join(m.model_id for m in config.model)}")
    print(
        f"  tools: {', '.join(t.name for t in tools) or 'none'}"
        + (f" + checker tool '{config.checker.checker_tool}'" if config.checker.expose_as_tool else "")
    )
    print(f"  checker: {config.checker.implementation}; adapter: {config.adapter.implementation}")
    print(
        f"  canary: {len(graded)} known answers graded as expected"
        if graded
        else "  canary: none (a user checker declares its known answers in [[checker.canary]])"
    )
    print(f"  output: {config.run.output}")
    if estimate:
        _print_estimate(config, plan)
    return 0


def _print_estimate(config: ApeConfig, plan: Any) -> None:
    """Tokens and cost of the run, from the rendered prompts' lengths and max_tokens."""
    from ape.tasks.solving.render import render
    from ape.tasks.stats.cost import estimate

    lengths = []
    for item in plan.provider():
        text = render(plan.template, item)
        if plan.system:
            text += render(plan.system, item)
        lengths.append(len(text))
    print("  estimate (about 4 characters per token, one model call per session):")
    total = 0.0
    priced = True
    for model in config.model:
        e = estimate(model, lengths, config.run.runs_per_data, config.solver.max_steps)
        out = (
            f"at most {e.output_tokens:,.0f}"
            if e.output_bound
            else f"about {e.output_tokens:,.0f} (no max_tokens: 256 per session assumed)"
        )
        cost = f"cost {e.cost:.4f}" if e.cost is not None else "no prices set"
        print(
            f"    {e.model_id}: {e.sessions} sessions, {e.input_tokens:,.0f} input tokens, {out} output tokens, {cost}"
        )
        if e.cost is None:
            priced = False
        else:
            total += e.cost
    if priced:
        print(
            f"    total: {total:.4f}"
            + (f" of max_cost {config.run.max_cost:g}" if config.run.max_cost is not None else "")
        )
    print("    tool calls, reformat prompts and max_steps > 1 add to this")


def plan(config_path: Path, difference: float, output: Path | None = None) -> int:
    """``ape plan``: items and runs needed to detect ``difference`` at 80% power."""
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
    _, _, ids = preflight(config)
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


def report(outputs: list[Path], out: Path | None) -> int:
    from ape.tasks.report.build import build_report
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
    envelope = build_report(list(outputs), target)
    print(markdown_table(envelope))
    log.info("report written to %s", target)
    return 0 if envelope.error is None else 1


def _benchmarks_of(outputs: list[Path]) -> dict[str, list[Path]]:
    """The benchmark name recorded in each folder's run metadata (its own or its models')."""
    from ape.tasks.storage.run_files import metadata_near

    found: dict[str, list[Path]] = {}
    for folder in outputs:
        for _, data in metadata_near(folder):
            name = data.get("benchmark")
            if name:
                found.setdefault(str(name), [])
                if folder not in found[str(name)]:
                    found[str(name)].append(folder)
    return found


def _recorded_config(output: Path) -> tuple[Path, Path, list[str] | None]:
    """(config file, top output folder, models to redo) recorded by an earlier run in
    ``output``: the benchmark's folder (every model), or one model's folder of a
    several-model benchmark (that model only). The run's metadata file is found by its
    content, whatever ``[run] metadata_file`` called it (see ape.tasks.storage.run_files)."""
    from ape.tasks.storage.run_files import metadata_near, recorded_config_file

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


def retry(output: Path, outcomes: str, config_path: Path | None, overrides: dict, *, use_server: bool = True) -> int:
    if not output.is_dir():
        raise ApeError("output folder not found", where=str(output))
    wanted = [o.strip().upper() for o in outcomes.split(",") if o.strip()]
    valid = [o.value for o in Outcome]
    for name in wanted:
        if name not in valid:
            raise ApeError(f"unknown outcome '{name}'", where="--outcomes", hint=f"use {', '.join(valid)}")
    from ape.tasks.storage.runs import split_run_folder

    recorded, top, models = _recorded_config(output) if config_path is None else (config_path, output, None)
    top, run_id = split_run_folder(top)  # a run folder continues that run
    overrides = {"run.output": str(top.resolve()), **overrides, "run.load_save": True}
    config = load_config(recorded, overrides)
    _log_level(config)
    if models:
        log.info("retrying model %s of %s (the other models' results stay as they are)", ", ".join(models), top)
    preflight(config)
    _cache_storage(config)
    with _output_lock(config):
        checked = _canary(config)
        _use_prefect_server(use_server)
        with checked:
            return _run_flow(config, redo_outcomes=wanted, only_models=models, run_id=run_id)


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
    print(history_markdown(runs))
    print(
        "Can the benchmark tell the models apart? (signal: spread of the models' mean scores; "
        "noise: one model's spread across runs with unchanged fingerprints)\n"
    )
    print(snr_markdown(signal_to_noise(runs)))
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


def items(output: Path, top: int) -> int:
    """Print the item-health ledger of OUTPUT's history: the worst items with their evidence."""
    from ape.tasks.stats.item_health import item_ledger, ledger_markdown
    from ape.tasks.storage.history import history_dir, read_all_items, read_runs

    if not history_dir(output).is_dir():
        raise ApeError(
            "no run history here",
            where=str(output),
            hint="runs started with `ape run --new-run` or by a schedule record one",
        )
    print(ledger_markdown(item_ledger(read_all_items(output), read_runs(output)), top=top))
    return 0


def baseline(output: Path, run_id: str) -> int:
    from ape.tasks.storage.history import set_baseline

    pinned = set_baseline(output, run_id)
    print(f"baseline: {pinned} (every new run is now also compared with it)")
    return 0


def demo(out: Path, *, parallel: bool = True) -> int:
    """``ape demo``: run, print the markdown table, return the demo's exit code.

    Uses the local Prefect server like ``ape run`` (started or reused) unless the
    environment sets APE_NO_SERVER=1 or PREFECT_API_URL.
    """
    from ape.flows.demo import NO_SERVER_ENV

    if os.environ.get(NO_SERVER_ENV) != "1":
        _use_prefect_server(True)
    return demo_exit(out, parallel=parallel)


def demo_exit(
    out: Path,
    parallel: bool = True,
    *,
    tasks_file: Path | None = None,
    adapters: Sequence[ModelAdapter] | None = None,
    outrank: tuple[str, str] = ("rule-based", "random"),
) -> int:
    """Run the demo against whatever Prefect API is configured, print the markdown table
    and the verdict, and return the exit code (see :mod:`ape.flows.demo`)."""
    from ape.flows.demo import WALL_BUDGET_S, run_demo
    from ape.tasks.report.markdown import markdown_table

    result = run_demo(out, parallel, tasks_file=tasks_file, adapters=adapters, outrank=outrank)
    print(markdown_table(result.envelope))
    wall = result.envelope.summary.wall_seconds
    if wall is not None and wall > WALL_BUDGET_S:
        log.warning("the evaluation took %.1f s, over the %.0f s budget", wall, WALL_BUDGET_S)
    if result.breach is not None:
        print(
            f"error: demo criterion '{result.breach.criterion.value}' failed: "
            f"{result.breach.message} (exit code {result.exit_code}; details in {result.report})",
            file=sys.stderr,
        )
    else:
        log.info("clean run; report in %s", result.report)
    return result.exit_code


def serve(
    config_path: Path, cron: str | None, name: str | None, *, timezone: str | None = None, interval: float | None = None
) -> int:
    from ape.deployments.serve import cron_schedule, load_benchmark_flow, serve_config

    config_path = config_path.resolve()
    config = load_config(config_path)  # fail fast on a bad config
    canary(config)  # and on a checker that cannot grade here (each run grades it again)
    if cron:
        cron_schedule(cron, timezone)  # and on a bad schedule, before any server starts
    from ape.server import configured_api_url

    configured = configured_api_url()
    api_url = _use_prefect_server(True)
    if api_url:
        for line in run_hint(api_url, "benchmark", name or config.name, ape_server=not configured):
            log.info("%s", line)
    deployment = f"benchmark/{name or config.name}"
    previous = _stop_gracefully_on_ctrl_c()
    try:
        serve_config(
            load_benchmark_flow(),
            config,
            cron,
            name or config.name,
            timezone=timezone,
            on_status=log.info,
            interval=interval,
        )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
    log.info(
        "stopped serving '%s': a run in progress was cancelled and does not enter the history; "
        "its schedule is paused until 'ape serve' runs again",
        deployment,
    )
    return 0


def _stop_gracefully_on_ctrl_c() -> Any:
    """Ctrl-C stops ``ape serve`` the way SIGTERM does: Prefect's runner then cancels the run
    in progress (state Cancelled, never half-counted in the history) and returns, instead of
    a KeyboardInterrupt traceback from deep inside its event loop. Returns the old handler."""

    def as_sigterm(_signum: int, _frame: Any) -> None:
        signal.raise_signal(signal.SIGTERM)

    return signal.signal(signal.SIGINT, as_sigterm)


def schema(output: Path | None) -> int:
    """``ape schema``: the JSON Schema of config.toml (``ape.config_schema``), printed or written
    to ``output``; an editor that reads ``#:schema PATH`` then completes and checks the keys."""
    from ape.config_schema import schema_text

    text = schema_text()
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ApeError(f"cannot write the schema: {exc.strerror or exc}", where=str(output)) from None
    print(f"wrote {output}; put '#:schema {output}' (or a path relative to the config) on config.toml's first line")
    return 0


def server(action: str, port: int | None) -> int:
    from ape import server as srv

    if action == "start":
        info = srv.start(port=port, on_status=log.info)
        print(f"Prefect server running: UI {info.ui_url}  API {info.api_url}  (log: {info.log_file})")
        if info.pid is not None:
            srv.auth_string()  # created now, so the file exists for the user to read
            print(f"The UI asks for a password once per browser: the line in {srv.server_home() / srv.AUTH_FILE}")
        return 0
    if action == "stop":
        print("stopped" if srv.stop() else "no APE-managed server running")
        return 0
    if action == "env":
        return server_env(port)
    running = srv.status(port=port)
    if running is None:
        print("not running")
        return 1
    mine = "" if running.pid is not None else f" (not started by APE for {srv.server_home()}: APE runs will not use it)"
    print(f"running: UI {running.ui_url}  API {running.api_url}{mine}")
    return 0


def server_env(port: int | None) -> int:
    """Print the line that points a new shell's ``prefect`` commands at the server APE uses.

    ``eval "$(ape server env)"`` then makes ``prefect deployment run ...`` reach it instead
    of timing out on Prefect's temporary in-process server.
    """
    from ape import server as srv

    api_url = srv.configured_api_url() if port is None else None
    if not api_url:
        info = srv.status(port=port)
        if info is None:
            print("no Prefect server running; start one with 'ape server start'", file=sys.stderr)
            return 1
        if info.pid is None:  # someone else's server on the port: never point prefect at it unasked
            print(
                f"error: the Prefect server at {info.ui_url} was not started by APE for {srv.server_home()}; "
                "start APE's own with 'ape server start', or export PREFECT_API_URL yourself to use that one",
                file=sys.stderr,
            )
            return 1
        api_url = info.api_url
        print(srv.env_line(api_url, srv.auth_string()))
        return 0
    print(srv.env_line(api_url))
    return 0
