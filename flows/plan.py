"""Resolve a validated config into everything a run needs, once, before any model call.

``ape validate`` runs exactly this (plus a full data scan), so whatever would
break a run mid-way (an import, a template variable, a tool factory) breaks
here first with a clear error.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ape.schemas.config import ApeConfig, ModelConfig
from ape.schemas.errors import ApeError
from ape.schemas.plugins import load_object
from ape.tasks.data import DataProvider
from ape.tasks.render import check_template

# Bump when the meaning of cached generations changes, to invalidate old caches.
CACHE_VERSION = "1"


@dataclass
class Plan:
    """One model's run of one config, fully resolved."""

    config: ApeConfig
    model_cfg: ModelConfig
    data_model: type[BaseModel]
    template: str
    system: str | None
    adapter: Callable[[str], Any]
    checker_factory: Callable[[], Any]
    metric: str | None
    hook: Callable[[Any], Any] | None = None  # [hooks] on_batch_saved
    fingerprint: dict[str, Any] = field(default_factory=dict)
    fingerprint_key: str = ""  # hash of ``fingerprint``, part of every session's cache key

    @property
    def model_id(self) -> str:
        return self.model_cfg.model_id

    @property
    def out_dir(self) -> Path:
        return self.config.output_dir_for(self.model_cfg)

    @property
    def cache_dir(self) -> Path:
        from ape.tasks.runs import cache_dir

        return cache_dir(self.config)

    def provider(self) -> DataProvider:
        d = self.config.data
        return DataProvider(d.file, self.data_model, d.start_id, d.end_id)


def _read(path: Path | None, inline: str | None, key: str) -> str | None:
    if inline is not None:
        return inline
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ApeError(f"cannot read {path}: {exc}", where=f"[prompt] {key}") from None


def load_data_model(config: ApeConfig) -> type[BaseModel]:
    where = f"{config.config_file or 'config'} [data] schema"
    model = load_object(config.data.schema_, kind="schema", where=where, base_dir=config.base_dir)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ApeError(f"'{config.data.schema_}' is not a pydantic model class", where=where)
    return model


def make_plan(config: ApeConfig, model_cfg: ModelConfig) -> Plan:
    from ape.tasks.adapt import load_adapter
    from ape.tasks.check import load_checker
    from ape.tasks.models import model_fingerprint
    from ape.tasks.runs import cache_scope_key

    data_model = load_data_model(config)
    template = _read(config.prompt.template_file, config.prompt.template, "template") or ""
    src = config.config_file or "config"
    check_template(template, data_model, where=f"{src} [prompt] template")
    system = _read(config.prompt.system_file, config.prompt.system, "system")
    if system:
        check_template(system, data_model, where=f"{src} [prompt] system")
    if config.data.category_field and config.data.category_field not in data_model.model_fields:
        raise ApeError(f"'{config.data.category_field}' is not a field of {data_model.__name__}",
                       where=f"{src} [data] category_field")
    adapter = load_adapter(config.adapter, config.base_dir)

    def checker_factory() -> Any:
        return load_checker(config.checker, config.base_dir)

    probe = checker_factory()  # fail now on a bad checker, not in a worker thread
    hook = None
    if config.hooks.on_batch_saved:
        hook = load_object(config.hooks.on_batch_saved, where=f"{src} [hooks] on_batch_saved",
                           base_dir=config.base_dir)
        if not callable(hook):
            raise ApeError(f"'{config.hooks.on_batch_saved}' is not callable",
                           where=f"{src} [hooks] on_batch_saved")
    if config.hooks.on_regression:
        from ape.flows.alerts import load_hook

        load_hook(config)  # fail now, not after the run
    fingerprint = {
        "version": CACHE_VERSION,
        "model": model_fingerprint(model_cfg),
        "system": system,
        "solver": config.solver.model_dump(mode="json"),
        "adapter": config.adapter.model_dump(mode="json"),
        "tools": {k: v.model_dump(mode="json") for k, v in sorted(config.tools.items())},
        # the checker shapes the conversation only when the model can call it
        "checker": config.checker.model_dump(mode="json") if config.checker.expose_as_tool else None,
        "cache_scope": cache_scope_key(config),  # a new run calls the model afresh
    }
    return Plan(config=config, model_cfg=model_cfg, data_model=data_model, template=template,
                system=system, adapter=adapter, checker_factory=checker_factory,
                metric=getattr(probe, "metric", None), hook=hook, fingerprint=fingerprint,
                fingerprint_key=fingerprint_hash(fingerprint, size=32))


def fingerprint_hash(data: Any, size: int = 16) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:size]


def run_label(config: Any, model_index: int | None = None) -> str | None:
    """"benchmark · model" for flow run names; ``config`` may still be a raw dict
    (a deployment's parameters). None when it is not a valid config."""
    try:
        cfg = config if isinstance(config, ApeConfig) else ApeConfig.model_validate(config)
    except Exception:
        return None
    models = cfg.model if model_index is None else cfg.model[model_index:model_index + 1]
    return f"{cfg.name} · {', '.join(m.model_id for m in models)}"
