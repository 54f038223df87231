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


def _output_lock(config: ApeConfig) -> Any:
    """The output folder's lock (re-entrant: the flow takes it again; see ape.tasks.outdir)."""
    from ape.tasks.outdir import OutputLock

    return OutputLock(config.run.output)


def _run_flow(config: ApeConfig, redo_outcomes: list[str] | None = None) -> int:
    """The benchmark flow, holding the output folder's lock and watching the Prefect API."""
    from contextlib import ExitStack

    from ape.flows.logs import quiet_prefect_console
    from ape.tasks.outdir import OutputLock
    from ape.watchdog import api_watchdog

    if not log.isEnabledFor(logging.DEBUG):  # --debug keeps Prefect's tracebacks
        quiet_prefect_console()
    with ExitStack() as stack:
        stack.enter_context(OutputLock(config.run.output))  # a second run exits 2 here, at once
        watchdog = api_watchdog(config.run.output)
        if watchdog is not None:
            stack.enter_context(watchdog)
        return _run_benchmark(config, redo_outcomes)


def _run_benchmark(config: ApeConfig, redo_outcomes: list[str] | None) -> int:
    from ape.flows.benchmark import benchmark
    from ape.flows.evaluate import ItemsFailed
    from ape.tasks.save import SaveFailed

    if config.run.task_runner == "dask":
        from ape.flows.feeders import dask_task_runner

        try:
            dask_task_runner(config)  # a clear error now, rather than a failed flow run
        except ApeError as exc:
            raise locate(exc, config) from None
    state = benchmark(config, redo_outcomes=redo_outcomes, return_state=True)
    report = config.run.output / "leaderboard.md"
    if report.exists():
        print(report.read_text(encoding="utf-8"))
    if state.is_completed():
        log.info("outputs in %s (report.json, leaderboard.parquet, summary.png, sessions.jsonl, ...)",
                 config.run.output)
        return 0
    exc = state.result(raise_on_failure=False)
    if isinstance(exc, ItemsFailed):
        print(f"error: {exc}", file=sys.stderr)
        print("       `ape retry " + str(config.run.output) + "` redoes only the failed items", file=sys.stderr)
        return 1
    if isinstance(exc, SaveFailed):
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if isinstance(exc, BaseException):
        raise exc
    raise RuntimeError(str(exc))


def run(config_path: Path, overrides: dict, *, use_server: bool = True) -> int:
    config = load_config(config_path, overrides)
    preflight(config)
    _cache_storage(config)
    with _output_lock(config):  # before a server start, so a second run is refused at once
        _use_prefect_server(use_server)
        return _run_flow(config)


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
    recorded, top = _recorded_config(output) if config_path is None else (config_path, output)
    overrides = {"run.output": str(top.resolve()), **overrides, "run.load_save": True}
    config = load_config(recorded, overrides)
    preflight(config)
    _cache_storage(config)
    with _output_lock(config):
        _use_prefect_server(use_server)
        return _run_flow(config, redo_outcomes=wanted)


def demo(out: Path, *, parallel: bool = True) -> int:
    from ape.flows.demo import run_demo_cli

    return run_demo_cli(out, parallel=parallel)


def serve(config_path: Path, cron: str | None, name: str | None) -> int:
    from ape.deployments.serve import serve as serve_deployment

    config_path = config_path.resolve()
    load_config(config_path)  # fail fast on a bad config
    _use_prefect_server(True)
    serve_deployment(config_path, cron, name)
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
