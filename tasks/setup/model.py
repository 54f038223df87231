"""Resolve a validated config into everything a run needs, once, before any model call.

``ape validate`` runs exactly this (plus a full data scan), so whatever would
break a run mid-way (an import, a template variable, a tool factory) breaks
here first with a clear error.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ape.schemas.config import ApeConfig, ModelConfig
from ape.schemas.errors import ApeError, did_you_mean
from ape.tasks.checking.builtin import BuiltinChecker
from ape.tasks.checking.canary import run_canary
from ape.tasks.checking.check import load_checker
from ape.tasks.checking.choice import ChoiceChecker
from ape.tasks.checking.judge import JudgeSpec, checker_fingerprint, judge_factory, resolve_judge
from ape.tasks.checking.judge_canary import run_judge_canary
from ape.tasks.checking.judge_labels import check_calibration_file
from ape.tasks.checking.logprob_canary import run_logprob_canary
from ape.tasks.common.deadline import call_with_timeout
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.models.local.llama_server import with_base_urls
from ape.tasks.models.scoring import check_can_score
from ape.tasks.plugins.hooks import load_hook
from ape.tasks.plugins.loader import load_object
from ape.tasks.session.agent import AgentSetup
from ape.tasks.solving.adapt import load_adapter
from ape.tasks.solving.render import check_template
from ape.tasks.storage.config_ref import resolve_config
from ape.tasks.storage.data import DataProvider, data_provenance
from ape.tasks.storage.runs import cache_dir, cache_scope_key

# Bump when the meaning of cached generations changes, to invalidate old caches.
CACHE_VERSION = "1"


@dataclass
class ModelSetup:
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
    judge: JudgeSpec | None = None  # a judge checker's judge, resolved once (run_judge)

    @property
    def model_id(self) -> str:
        return self.model_cfg.model_id

    @property
    def out_dir(self) -> Path:
        return self.config.output_dir_for(self.model_cfg)

    @property
    def cache_dir(self) -> Path:

        return cache_dir(self.config)

    def provider(self) -> DataProvider:
        return DataProvider.for_config(self.config.data, self.data_model)

    def for_run(self, config: ApeConfig) -> ModelSetup:
        """This setup for ``config``: the config it was built from, writing into another
        output folder (a run folder, :func:`ape.tasks.storage.runs.config_for_run`).

        What depends on the folder is made again: the cache scope in the fingerprint (a new
        run calls the model afresh) and a judge's checker factory (its cache lives in the
        run's folder). Everything else (data model, template, adapter, checker, hooks) does
        not depend on the folder and is kept as resolved."""
        fingerprint = {**self.fingerprint, "cache_scope": cache_scope_key(config)}
        factory = self.checker_factory
        if config.checker.implementation == "judge" and cache_dir(config) != cache_dir(self.config):
            factory = run_checker_factory(config, self.data_model, self.judge)
        return dataclasses.replace(
            self,
            config=config,
            checker_factory=factory,
            fingerprint=fingerprint,
            fingerprint_key=fingerprint_hash(fingerprint, size=32),
        )

    def at_local_servers(self, base_urls: dict[str, str]) -> ModelSetup:
        """This setup with the endpoints of the models APE serves for the run (model id to
        ``base_url``, :func:`ape.tasks.models.local.llama_server.local_model_servers`): the model's,
        and the judge's when it is one of them. The fingerprint stays (a local server's port
        is not part of it)."""
        if not base_urls:
            return self
        url = base_urls.get(self.model_cfg.model_id)
        config = with_base_urls(self.config, base_urls)
        judge = self.judge.at_local_servers(base_urls) if self.judge is not None else None
        factory = self.checker_factory
        if judge is not self.judge:  # the judge is a local model: its checker asks its server
            factory = run_checker_factory(config, self.data_model, judge)
        return dataclasses.replace(
            self,
            config=config,
            model_cfg=self.model_cfg.model_copy(update={"base_url": url}) if url else self.model_cfg,
            judge=judge,
            checker_factory=factory,
        )


def run_judge(config: ApeConfig) -> JudgeSpec | None:
    """The judge of a run graded by the ``judge`` checker (:func:`ape.tasks.checking.judge.resolve_judge`),
    resolved once for every setup; None for any other checker (and for a ``[choices]``
    run, which ``choice`` grades)."""
    if config.choices is not None or config.checker.implementation != "judge":
        return None
    return resolve_judge(config)


def prompt_text(path: Path | None, inline: str | None, key: str) -> str | None:
    """A prompt part (``key``): the inline text, else the file's; an ApeError naming the key when unreadable."""
    if inline is not None:
        return inline
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ApeError(f"cannot read {path}: {exc}", where=f"[prompt] {key}") from None


def load_data_model(config: ApeConfig) -> type[BaseModel]:
    where = f"{config.shown_file()} [data] schema"
    model = load_object(config.data.schema_, kind="schema", where=where, base_dir=config.base_dir)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ApeError(f"'{config.data.schema_}' is not a pydantic model class", where=where)
    return model


def make_setup(config: ApeConfig, model_cfg: ModelConfig, judge: JudgeSpec | None = None) -> ModelSetup:
    """``model_cfg``'s setup of ``config``. ``judge``: the run's judge (:func:`run_judge`),
    resolved once by the caller for every model; resolved here when None."""
    data_model = load_data_model(config)
    template = prompt_text(config.prompt.template_file, config.prompt.template, "template") or ""
    src = config.shown_file()
    check_template(template, data_model, where=f"{src} [prompt] template")
    system = prompt_text(config.prompt.system_file, config.prompt.system, "system")
    if system:
        check_template(system, data_model, where=f"{src} [prompt] system")
    _check_run_fields(config, data_model)
    adapter = functools.partial(
        call_with_timeout,
        load_adapter(config.adapter, config.base_dir),
        limit_s=config.adapter.timeout_s,
        label="the adapter",
        key="[adapter] timeout_s",
    )

    if config.choices is not None:
        check_choices(config, model_cfg, data_model, system)
    judge = judge if judge is not None else run_judge(config)
    checker_factory = run_checker_factory(config, data_model, judge)
    probe = checker_factory()  # fail now on a bad checker, not in a worker thread
    check_checker_fields(probe, data_model, where=f"{src} [checker] args")
    if config.sandbox is not None:  # an agent's check function: loaded now, not in a worker
        AgentSetup.of(config)
    hook = load_hook(config, "on_batch_saved")
    load_hook(config, "on_regression")  # fail now, not after the run
    fingerprint = _cache_fingerprint(config, model_cfg, system)
    return ModelSetup(
        config=config,
        model_cfg=model_cfg,
        data_model=data_model,
        template=template,
        system=system,
        adapter=adapter,
        checker_factory=checker_factory,
        metric=getattr(probe, "metric", None),
        hook=hook,
        fingerprint=fingerprint,
        fingerprint_key=fingerprint_hash(fingerprint, size=32),
        judge=judge,
    )


def _check_run_fields(config: ApeConfig, data_model: type[BaseModel]) -> None:
    """The [data] fields named in the config are the data model's, and [run] max_cost has
    every model's price: checked before any model is called."""
    src = config.shown_file()
    if config.data.category_field and config.data.category_field not in data_model.model_fields:
        raise ApeError(
            f"'{config.data.category_field}' is not a field of {data_model.__name__}",
            where=f"{src} [data] category_field",
        )
    if config.data.cluster_field and config.data.cluster_field not in data_model.model_fields:
        raise ApeError(
            f"'{config.data.cluster_field}' is not a field of {data_model.__name__}",
            where=f"{src} [data] cluster_field",
        )
    if config.run.max_cost is not None and not all(
        m.price_input_per_mtok is not None or m.price_output_per_mtok is not None for m in config.model
    ):
        raise ApeError(
            "[run] max_cost needs a price for every model",
            where=f"{src} [run] max_cost",
            hint="set price_input_per_mtok and price_output_per_mtok in each [[model]]",
        )


def _cache_fingerprint(config: ApeConfig, model_cfg: ModelConfig, system: str | None) -> dict[str, Any]:
    """What a cached answer of ``model_cfg`` depends on: the key of the run's result cache."""
    fingerprint = {
        "version": CACHE_VERSION,
        "model": model_fingerprint(model_cfg),
        "system": system,
        # time limits change no answer, so they stay out of the key
        # a token limit changes answers when set; unset it is left out, so older keys still hold
        "solver": config.solver.model_dump(
            mode="json",
            exclude={"tool_timeout_s"} | (set() if config.solver.max_session_tokens else {"max_session_tokens"}),
        ),
        "adapter": config.adapter.model_dump(mode="json", exclude={"timeout_s"}),
        "tools": {k: v.model_dump(mode="json") for k, v in sorted(config.tools.items())},
        # the checker shapes the conversation only when the model can call it
        "checker": config.checker.model_dump(mode="json", exclude={"timeout_s"})
        if config.checker.expose_as_tool
        else None,
        "cache_scope": cache_scope_key(config),  # a new run calls the model afresh
    }
    if config.sandbox is not None:
        # An agent session is cached with its grade (the folder it was graded on is gone), so
        # what shapes the tools' replies and the grade is part of the key: the sandbox's
        # limits and seeding, and the checker (its test command). Where the folders are made,
        # keeping them, and the seed folders' own paths (a copied config folder keeps its cache)
        # are not; a seed folder's changed contents are not seen (docs/agents.md).
        fingerprint["sandbox"] = config.sandbox.model_dump(
            mode="json", exclude={"root", "keep", "seed_dir", "archive_dir", "tests_dir"}
        )
        fingerprint["checker"] = config.checker.model_dump(mode="json", exclude={"timeout_s"})
    if config.choices is not None:  # log-likelihood scoring; the metric is applied after the cache
        fingerprint["choices"] = config.choices.model_dump(mode="json", exclude={"metric"})
    return fingerprint


def run_checker_factory(
    config: ApeConfig, data_model: type[BaseModel], judge: JudgeSpec | None = None
) -> Callable[[], Any]:
    """The maker of the run's checker instances: ``[checker]`` as configured, or for the
    judge (a model grades, so it needs the whole config and the run's cache) its factory.
    ``judge``: the run's judge (:func:`run_judge`); resolved here when None."""
    if config.task is not None:  # the harness's task scores generated answers and choices alike
        return lambda: load_checker(config.checker, config.base_dir)
    if config.choices is not None or config.checker.implementation == "choice":
        return choice_checker_factory(config)
    if config.checker.implementation == "judge":
        spec = judge if judge is not None else resolve_judge(config)
        factory = judge_factory(config, data_model, cache_dir(config) if config.run.cache else None, spec)
        check_calibration_file(spec, data_model)
        return factory

    return lambda: load_checker(config.checker, config.base_dir)


def choice_checker_factory(config: ApeConfig) -> Callable[[], Any]:
    """The ``choice`` checker of a ``[choices]`` run; an error for ``choice`` without ``[choices]``."""

    choices = config.choices
    src = config.shown_file()
    if choices is None:
        raise ApeError(
            "checker 'choice' grades log-likelihood runs, and this config has no [choices] section",
            where=f"{src} [checker] implementation",
            hint='add [choices] (field = "choices", gold = "answer"), or use another checker',
        )
    if config.checker.implementation != "choice":
        raise ApeError(
            f"a [choices] run is graded by checker 'choice', not '{config.checker.implementation}'",
            where=f"{src} [checker] implementation",
            hint='remove the [checker] section (or set implementation = "choice"); [choices] metric '
            "picks acc or acc_norm",
        )
    return lambda: ChoiceChecker(choices)


def check_choices(config: ApeConfig, model_cfg: ModelConfig, data_model: type[BaseModel], system: str | None) -> None:
    """What a ``[choices]`` run needs, checked before any model call: its fields exist, the
    model can score text, and nothing is configured that such a run would silently ignore."""

    choices = config.choices
    assert choices is not None
    src = config.shown_file()
    known = readable_fields(data_model)
    keys = [("fields" if choices.fields is not None else "field", name) for name in choices.source_fields()]
    for key, name in [*keys, ("gold", choices.gold)]:
        if name not in known:
            raise ApeError(
                f"'{name}' is not a field of {data_model.__name__} (fields: {', '.join(data_model.model_fields)})",
                where=f"{src} [choices] {key}",
                hint=did_you_mean(name, sorted(known)) or "name the field that holds it",
            )
    if system:
        raise ApeError(
            "a log-likelihood run scores one text per choice: a system prompt would be lost",
            where=f"{src} [prompt] system",
            hint="put the instructions into the template",
        )
    if config.tools or config.checker.expose_as_tool:
        raise ApeError(
            "a log-likelihood run calls no tools: the model scores the choices, it writes nothing",
            where=f"{src} [tools]",
            hint="remove the [tools] sections and [checker] expose_as_tool",
        )
    if config.task is None:
        check_can_score(model_cfg)
        return
    try:
        check_can_score(model_cfg)
    except ApeError as exc:  # said of the harness's task, whose config has no [choices] to remove
        raise ApeError(
            f"task '{config.task.lm_eval}' is a multiple_choice task, scored by each choice's log-likelihood: "
            + exc.message.split("; ")[0],
            where=f"{src} {exc.where}",
            hint="use a model that scores a given text (provider 'llama-cpp', or 'openai' with the base_url of "
            "a /v1/completions server that echoes prompt log-probabilities), or a generative variant of the task",
        ) from None


def grade_canary(config: ApeConfig, setup: ModelSetup | None = None) -> list[Any]:
    """Grade the checker's known answers (:mod:`ape.tasks.checking.canary`) with the checker
    the run will use, and for a judge its injected wrong answers
    (:mod:`ape.tasks.checking.judge_canary`), and for a ``[choices]`` run the endpoints' prompt
    log-probabilities (:mod:`ape.tasks.checking.logprob_canary`); raises ``CanaryFailed`` (one
    line) when one comes out wrong. ``setup``: a setup of this config already built (its
    data model and checker factory are the run's; otherwise they are resolved here)."""

    data_model = setup.data_model if setup is not None else load_data_model(config)
    judge = setup.judge if setup is not None else run_judge(config)
    factory = setup.checker_factory if setup is not None else run_checker_factory(config, data_model, judge)
    graded = run_canary(config.checker, factory, data_model)
    if judge is not None:
        graded += run_judge_canary(config, judge, factory, data_model)
    if config.choices is not None:  # an endpoint must echo right prompt log-probabilities
        run_logprob_canary(config)
    return graded


def resume_fingerprints(setup: ModelSetup) -> dict[str, Any]:
    """What a saved result depends on, part by part, as recorded in metadata.json.

    On resume (see :mod:`ape.flows.resume`) a changed ``generation`` part refuses to mix
    results, a changed ``checker`` re-scores, and ``runs_per_data`` is compared as a number.
    """
    fp = setup.fingerprint
    cfg = setup.config
    generation = {
        "prompt": fingerprint_hash([setup.template, fp.get("system")]),
        "model": fingerprint_hash(fp.get("model")),
        "data": data_provenance(cfg.data)["data_sha256"],
        "solver": fingerprint_hash([fp.get("solver"), fp.get("adapter"), fp.get("tools"), fp.get("checker")]),
    }
    if fp.get("choices") is not None:
        generation["choices"] = fingerprint_hash(fp["choices"])

    checker = checker_fingerprint(cfg, spec=setup.judge)  # a judge's model and rubric are part of it
    model = dict(fp.get("model") or {})
    budget = model.pop("max_tokens", None)
    return {
        "generation": generation,
        # the model without its token budget, and the budget: a larger max_tokens changes no
        # answer that finished under the smaller one, so resuming may keep those (ape.flows.resume)
        "budget": {"model": fingerprint_hash(model), "max_tokens": budget},
        "checker": fingerprint_hash([checker, setup.metric]),
        "runs_per_data": cfg.run.runs_per_data,
    }


def check_checker_fields(checker: Any, data_model: type[BaseModel], where: str) -> None:
    """A built-in checker's reference field (``args.field``, ``args.tests_field``) must be a
    field of the DataModel: otherwise every check of the run would be a check error."""

    if not isinstance(checker, BuiltinChecker):
        return
    key = "tests_field" if hasattr(checker.args, "tests_field") else "field"
    name = getattr(checker.args, key)
    known = readable_fields(data_model)
    if name not in known:
        raise ApeError(
            f"the checker reads the reference from '{name}', which is not a field of "
            f"{data_model.__name__} (fields: {', '.join(data_model.model_fields)})",
            where=f"{where} {key}",
            hint=did_you_mean(name, sorted(known)) or f"set args.{key} to the field that holds the reference",
        )


def readable_fields(data_model: type[BaseModel]) -> set[str]:
    """The names an item's value can be read by: its fields, their aliases, and its computed
    fields and properties (they hold a value too)."""
    known = set(data_model.model_fields) | {f.alias for f in data_model.model_fields.values() if f.alias}
    return (
        known
        | set(data_model.model_computed_fields)
        | {n for n in dir(data_model) if isinstance(getattr(data_model, n, None), property)}
    )


def fingerprint_hash(data: Any, size: int = 16) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:size]


def run_label(config: Any, model_index: int | None = None) -> str | None:
    """ "benchmark · model" for flow run names; ``config`` may still be a raw dict
    (a deployment's parameters) or a reference to a stored config
    (:mod:`ape.tasks.storage.config_ref`). None when it is not a valid config."""
    try:
        cfg = resolve_config(config)
    except Exception:
        return None
    models = cfg.model if model_index is None else cfg.model[model_index : model_index + 1]
    return f"{cfg.name} · {', '.join(m.model_id for m in models)}"
