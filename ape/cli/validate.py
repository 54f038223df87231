"""``ape validate CONFIG``: everything a run checks before its first model call; calls no model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ape.cli.options import overrides as flag_overrides
from ape.schemas.config import ApeConfig
from ape.tasks.common.inert import terminal_safe
from ape.tasks.common.words import count
from ape.tasks.storage.config_file import load_config

NAME = "validate"
HELP = "check a config, its plugins, data and template; calls no model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path)
    p.add_argument(
        "--estimate", action="store_true", help="also estimate tokens and cost from the prompt lengths and max_tokens"
    )
    p.add_argument(
        "--output", type=Path, default=None, help="check this output folder instead of [run] output (as run --output)"
    )


def main(args: argparse.Namespace) -> int:
    return validate(args.config, estimate=args.estimate, overrides=flag_overrides(args))


def validate(config_path: Path, *, estimate: bool = False, overrides: dict | None = None) -> int:
    """``ape validate``: everything a run checks before its first model call; ``overrides``
    are the dotted keys of command-line flags (``--output``), as for ``ape run``."""
    from ape.flows.preflight import canary, preflight  # deferred: the plugins and Prefect (CLI start-up)
    from ape.tasks.models.limits.reachability import probe_target
    from ape.tasks.solving.render import template_variables

    config = load_config(config_path, overrides)
    checked = preflight(config)
    setup, tools, ids = checked.setups[0], checked.tools, checked.ids
    graded = canary(config, checked)  # before "ok": a checker that cannot grade is not a valid config
    variables = ", ".join(sorted(template_variables(setup.template))) or "none"
    print(f"ok: {config_path}")
    first_last = terminal_safe(f" ({ids[0]} .. {ids[-1]})") if ids else ""  # ids come from the data file
    print(f"  data: {len(ids)} items from {_data_name(config)}{first_last}")
    print(f"  template variables: {variables}")
    print(f"  models: {', '.join(m.model_id for m in config.model)}")
    served = [target for target in map(probe_target, config.model) if target is not None]
    if served:  # validate sends no request: say so, so "ok" is not read as "reachable"
        urls = ", ".join(terminal_safe(f"{t.model_id} at {t.base_url}") for t in served)
        print(f"  endpoints: not contacted ({urls}); `ape run` checks each one first (one GET .../models)")
    print(
        f"  tools: {', '.join(t.name for t in tools) or 'none'}"
        + (f" + checker tool '{config.checker.checker_tool}'" if config.checker.expose_as_tool else "")
    )
    print(f"  checker: {config.checker.implementation}; adapter: {config.adapter.implementation}")
    print(f"  canary: {canary_summary(config, graded)}")
    print(f"  output: {config.run.output}")
    if estimate:
        _print_estimate(config, setup)
    return 0


def canary_summary(config: ApeConfig, graded: list[Any]) -> str:
    """What the canary graded before "ok", in words true for the run's checker: its known
    answers, and for a ``[choices]`` run whether endpoints' log-probabilities were probed."""
    from ape.tasks.models.scoring import scores_in_process
    from ape.tasks.plugins.registry import is_short_name

    name = config.checker.implementation
    if graded:
        text = f"{count(len(graded), 'known answer')} graded as expected"
    elif is_short_name(name):
        text = f"none (the built-in checker '{name}' has no known answers of its own; add some in [[checker.canary]])"
    else:
        text = "none (a user checker declares its known answers in [[checker.canary]])"
    if config.choices is not None:
        probed = [m.model_id for m in config.model if not scores_in_process(m)]
        text += (
            f"; prompt log-probabilities of {', '.join(probed)} echoed right"
            if probed
            else "; no endpoint to probe for prompt log-probabilities (the models score in process)"
        )
    return text


def _print_estimate(config: ApeConfig, setup: Any) -> None:
    """Tokens and cost of the run, from the rendered prompts' lengths and max_tokens."""
    from ape.tasks.solving.render import render  # deferred with the plugins (above)
    from ape.tasks.stats.cost import estimate

    lengths = []
    for item in setup.provider():
        text = render(setup.template, item)
        if setup.system:
            text += render(setup.system, item)
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


def _data_name(config: ApeConfig) -> str:
    """The data file's name, or the Hugging Face dataset's ``path/name[split]``."""
    if config.data.file is not None:
        return config.data.file.name
    return terminal_safe(config.data.source_name())
