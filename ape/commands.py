"""What each ``ape`` subcommand does; ``ape.cli`` only parses arguments."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from ape.api import preflight
from ape.config import load_config, locate
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import Outcome

log = logging.getLogger("ape")


def _use_prefect_server(use_server: bool) -> None:
    """Make runs visible in a Prefect UI that keeps their history (see ape.server)."""
    if not use_server:
        return
    from ape.server import ensure_api_url

    ensure_api_url(on_status=log.info)


def _cache_storage(config: ApeConfig) -> None:
    # Cached generations live next to the results they belong to, unless the user chose a
    # Prefect result storage location themselves. Must be set before Prefect is imported.
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(config.run.output / ".cache" / "results"))


EXIT_REGRESSED = 3  # `ape run --fail-on-regression`: a model got worse


def _run_flow(config: ApeConfig, redo_outcomes: list[str] | None = None, *, new_run: bool | None = None,
              run_id: str | None = None, fail_on_regression: bool = False) -> int:
    from ape.flows.benchmark import benchmark
    from ape.flows.evaluate import ItemsFailed

    if config.run.task_runner == "dask":
        from ape.flows.feeders import dask_task_runner

        try:
            dask_task_runner(config)  # a clear error now, rather than a failed flow run
        except ApeError as exc:
            raise locate(exc, config) from None
    state = benchmark(config, redo_outcomes=redo_outcomes, new_run=new_run, run_id=run_id,
                      return_state=True)
    output = _run_output(config, state, new_run or bool(run_id))
    report = output / "leaderboard.md"
    if report.exists():
        print(report.read_text(encoding="utf-8"))
    if state.is_completed():
        log.info("outputs in %s (report.json, leaderboard.parquet, summary.png, sessions.jsonl, ...)",
                 output)
        return _regression_exit(state.result(), fail_on_regression)
    exc = state.result(raise_on_failure=False)
    if isinstance(exc, ItemsFailed):
        print(f"error: {exc}", file=sys.stderr)
        print("       `ape retry " + str(output) + "` redoes only the failed items", file=sys.stderr)
        return 1
    if isinstance(exc, BaseException):
        raise exc
    raise RuntimeError(str(exc))


def _run_output(config: ApeConfig, state: Any, new_run: bool) -> Path:
    """The folder this run wrote: the output folder, or its run folder for a new run."""
    if not new_run:
        return config.run.output
    from ape.tasks.runs import find_by_flow_run

    return find_by_flow_run(config.run.output, str(state.state_details.flow_run_id)) or config.run.output


def _regression_exit(result: Any, fail_on_regression: bool) -> int:
    regressed = [r for r in (result or {}).get("regressions") or [] if r["verdict"] == "regressed"]
    for row in regressed:
        print(f"regression: {row['model_id']} against its {row['against']} run {row['reference_run_id']}: "
              f"score {row['mean_diff']:+.3f}, p={row['p_value']:.3g}", file=sys.stderr)
    return EXIT_REGRESSED if regressed and fail_on_regression else 0


def run(config_path: Path, overrides: dict, *, use_server: bool = True, new_run: bool = False,
        fail_on_regression: bool = False) -> int:
    config = load_config(config_path, overrides)
    preflight(config)
    _cache_storage(config)
    _use_prefect_server(use_server)
    return _run_flow(config, new_run=new_run, fail_on_regression=fail_on_regression)


def validate(config_path: Path) -> int:
    from ape.tasks.render import template_variables

    config = load_config(config_path)
    plan, tools, ids = preflight(config)
    variables = ", ".join(sorted(template_variables(plan.template))) or "none"
    print(f"ok: {config_path}")
    print(f"  data: {len(ids)} items from {config.data.file.name}"
          + (f" ({ids[0]} .. {ids[-1]})" if ids else ""))
    print(f"  template variables: {variables}")
    print(f"  models: {', '.join(m.model_id for m in config.model)}")
    print(f"  tools: {', '.join(t.name for t in tools) or 'none'}"
          + (f" + checker tool '{config.checker.checker_tool}'" if config.checker.expose_as_tool else ""))
    print(f"  checker: {config.checker.implementation}; adapter: {config.adapter.implementation}")
    print(f"  output: {config.run.output}")
    return 0


def report(outputs: list[Path], out: Path | None) -> int:
    from ape.tasks.report import build_report, markdown_table

    for folder in outputs:
        if not folder.is_dir():
            raise ApeError("output folder not found", where=str(folder))
    target = out or outputs[0]
    envelope = build_report(list(outputs), target)
    print(markdown_table(envelope))
    log.info("report written to %s", target)
    return 0 if envelope.error is None else 1


def _recorded_config(output: Path) -> tuple[Path, Path]:
    """(config file, top output folder) recorded by an earlier run in ``output``."""
    candidates = [output / "metadata.json", *sorted(output.glob("*/metadata.json"))]
    for meta in candidates:
        if meta.is_file():
            data = json.loads(meta.read_text(encoding="utf-8"))
            if data.get("config_file"):
                top = output if meta.parent == output else meta.parent.parent
                return Path(data["config_file"]), top
    raise ApeError("no metadata.json with a recorded config found", where=str(output),
                   hint="pass --config CONFIG.toml")


def retry(output: Path, outcomes: str, config_path: Path | None, overrides: dict, *,
          use_server: bool = True) -> int:
    if not output.is_dir():
        raise ApeError("output folder not found", where=str(output))
    wanted = [o.strip().upper() for o in outcomes.split(",") if o.strip()]
    valid = [o.value for o in Outcome]
    for name in wanted:
        if name not in valid:
            raise ApeError(f"unknown outcome '{name}'", where="--outcomes", hint=f"use {', '.join(valid)}")
    from ape.tasks.runs import split_run_folder

    recorded, top = _recorded_config(output) if config_path is None else (config_path, output)
    top, run_id = split_run_folder(top)  # a run folder continues that run
    overrides = {"run.output": str(top.resolve()), **overrides, "run.load_save": True}
    if run_id is not None:
        overrides["run.output"] = str(top.resolve())
    config = load_config(recorded, overrides)
    preflight(config)
    _cache_storage(config)
    _use_prefect_server(use_server)
    return _run_flow(config, redo_outcomes=wanted, run_id=run_id)


def history(output: Path, model: str | None, chart: bool) -> int:
    """Print each model's score per run with CIs and verdicts; write OUTPUT/trend.png."""
    from ape.tasks.history import history_dir, read_runs
    from ape.tasks.trend import history_markdown, write_trend_chart

    if not history_dir(output).is_dir():
        raise ApeError("no run history here", where=str(output),
                       hint="runs started with `ape run --new-run` or by a schedule record one")
    runs = read_runs(output)
    if model is not None:
        if model not in set(runs["model_id"]):
            raise ApeError(f"no model '{model}' in the history", where="--model",
                           hint=f"models: {', '.join(sorted(set(runs['model_id'])))}")
        runs = runs[runs["model_id"] == model]
    print(history_markdown(runs))
    if chart:
        path = write_trend_chart(runs, output / "trend.png")
        log.info("trend chart written to %s", path)
    return 0


def baseline(output: Path, run_id: str) -> int:
    from ape.tasks.history import set_baseline

    pinned = set_baseline(output, run_id)
    print(f"baseline: {pinned} (every new run is now also compared with it)")
    return 0


def demo(out: Path, *, parallel: bool = True) -> int:
    from ape.flows.demo import run_demo_cli

    return run_demo_cli(out, parallel=parallel)


def serve(config_path: Path, cron: str | None, name: str | None, interval: float | None = None) -> int:
    from ape.deployments.serve import serve as serve_deployment

    config_path = config_path.resolve()
    load_config(config_path)  # fail fast on a bad config
    _use_prefect_server(True)
    serve_deployment(config_path, cron, name, interval=interval)
    return 0


def server(action: str, port: int | None) -> int:
    from ape import server as srv

    if action == "start":
        info = srv.start(port=port, on_status=log.info)
        print(f"Prefect server running: UI {info.ui_url}  API {info.api_url}  (log: {info.log_file})")
        return 0
    if action == "stop":
        print("stopped" if srv.stop() else "no APE-managed server running")
        return 0
    info = srv.status(port=port)
    if info is None:
        print("not running")
        return 1
    print(f"running: UI {info.ui_url}  API {info.api_url}")
    return 0
