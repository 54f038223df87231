"""Everything a run checks before its first model call, in one place.

``ape run``, ``ape retry``, ``ape validate``, ``ape plan``, ``ape serve``, ``ape.run`` and
a served benchmark's flow run all call these two functions, so a bad input gives the same
one line (naming the file and key) whichever way the run was started:

- :func:`preflight` resolves every plugin, the template, the data, the output folder and
  its history, and refuses to mix results with a different earlier run (after the data
  file's own errors, so a broken line is named as such, not as a changed file);
- :func:`canary` grades the checker's known answers (and a judge's injected wrong answers,
  and a ``[choices]`` endpoint's prompt log-probabilities) with the checker the run uses;
- :func:`endpoints` sends one request to every model endpoint (and a judge's),
  all at once, and stops the run when one cannot be reached
  (:mod:`ape.tasks.models.limits.reachability`). ``ape validate`` and ``ape plan`` stay offline.

What preflight resolved travels as one object, :class:`Checked` (each model's setup, the
judge, and once graded the canary's result), handed to the flows explicitly: by argument
(a served benchmark's flow), or for a flow run (whose parameters are JSON) by the run
token :func:`hand_over` gives and :func:`handed` looks up. Nothing is matched by comparing
configs; a flow run whose token this process does not know (a retry started elsewhere)
resolves and grades afresh.

The canary is graded once per run, by :func:`graded_canary`: from :func:`ape.launch.launch`
before a server starts, or from the benchmark flow when what it was handed has no graded
canary yet (a deployment's run, a flow run started on its own).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ape.flows.resume import recorded, refuse_mixing
from ape.schemas.config import ApeConfig, ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.checking.judge import JudgeSpec
from ape.tasks.models.build import build_model
from ape.tasks.models.limits.reachability import (
    auth_warnings,
    path_warnings,
    probe_all,
    probe_target,
    unreachable_lines,
)
from ape.tasks.models.mocks.data import check_mock_data
from ape.tasks.models.scoring import build_scorer
from ape.tasks.models.task_requests import overridden
from ape.tasks.setup.model import ModelSetup, grade_canary, make_setup, resume_fingerprints, run_judge
from ape.tasks.solving.choices import check_item
from ape.tasks.solving.tools import load_tools
from ape.tasks.storage.config_file import locate
from ape.tasks.storage.data import ItemCheck
from ape.tasks.storage.history import check_history
from ape.tasks.storage.lm_eval_tasks import generation_asks
from ape.tasks.storage.outdir import check_output_folder

log = logging.getLogger("ape")


@dataclass(frozen=True)
class Checked:
    """What :func:`preflight` resolved: each model's setup, the tools, the item ids, the
    judge (a ``judge`` checker's, else None) and, once :func:`graded_canary` graded it, the
    canary's graded examples (None: not graded yet)."""

    setups: list[ModelSetup]
    tools: list[Any]
    ids: list[str]
    judge: JudgeSpec | None = None
    graded: list[Any] | None = None

    def setup(self, model_index: int) -> ModelSetup:
        """The setup of ``config.model[model_index]`` (one per model, in the config's order)."""
        return self.setups[model_index]

    def at_local_servers(self, base_urls: dict[str, str]) -> Checked:
        """This result with the endpoints of the models APE serves for the run
        (:meth:`ape.tasks.setup.model.ModelSetup.at_local_servers`)."""
        if not base_urls:
            return self
        return dataclasses.replace(
            self,
            setups=[setup.at_local_servers(base_urls) for setup in self.setups],
            judge=self.judge.at_local_servers(base_urls) if self.judge is not None else None,
        )


# Preflight results handed to flow runs in this process, by run token (see the module doc).
_HANDED: dict[str, Checked] = {}


@contextmanager
def hand_over(checked: Checked | None) -> Iterator[str | None]:
    """Within the block, :func:`handed` returns ``checked`` for the token yielded (None when
    there is nothing to hand over). A setup holds classes and callables, so it cannot be a
    flow-run parameter; the token can. Nothing outlives the block: a served deployment
    reads its config file afresh at every run."""
    if checked is None:
        yield None
        return
    token = uuid.uuid4().hex
    _HANDED[token] = checked
    try:
        yield token
    finally:
        _HANDED.pop(token, None)


def handed(token: str | None) -> Checked | None:
    """The preflight result :func:`hand_over` gave ``token``; None for no token or one this
    process did not hand over (the flow then resolves its own)."""
    return _HANDED.get(token) if token else None


def preflight(config: ApeConfig, *, run_folder: bool = False) -> Checked:
    """Resolve every plugin, the template and the data before any flow starts, so a bad
    input is one clear line instead of a failed flow run.

    ``run_folder``: the run writes a run folder ``OUTPUT/runs/<run id>`` (a new run, or
    one continued), not the output folder itself, so the results saved in the output
    folder are not the ones it resumes and are not compared with this config (the flow
    checks the folder it writes, :func:`ape.flows.resume.refuse_mixing`)."""
    try:
        check_output_folder(config.run.output)
        check_history(config.run.output)  # a damaged history is found now, not after every model call
        judge = run_judge(config)  # once, for every setup, the fingerprints and the canary
        check_judge_model(config, judge)  # before the setups build their checkers (and so the judge)
        setups = [make_setup(config, model, judge) for model in config.model]
        for model in config.model:  # what a solver worker builds: a scorer for [choices], else a chat model
            if config.choices is not None:
                build_scorer(model, config.base_dir)
            else:
                build_model(model, config.base_dir)
        tools = load_tools(config.tools, config.base_dir)
        # the data file's own errors before the saved results are compared with it: a broken
        # line changes the file's digest too, and "holds results made with a different data
        # file ... start afresh" is the wrong advice for a file that merely needs mending
        ids = setups[0].provider().scan(item_check(config))
        if config.task is not None:  # what of the harness's task the run does not apply, said once
            asks, lines = generation_asks(config.task, config.base_dir)
            for line in lines + [line for model in config.model for line in overridden(model, asks)]:
                log.warning("%s", line)
        sliced = config.data.start_id is not None or config.data.end_id is not None
        for model in config.model:  # a mock's field names and id tables, against the data
            check_mock_data(model, setups[0].data_model, ids, sliced=sliced)
        if config.run.load_save and not run_folder:  # refuse to mix results now, not in a failed flow run
            for setup in setups:
                previous = recorded(setup.out_dir / config.run.metadata_file)
                refuse_mixing(previous, resume_fingerprints(setup), setup.out_dir)
        return Checked(setups, tools, ids, judge)
    except ApeError as exc:
        raise locate(exc, config) from None


def item_check(config: ApeConfig) -> ItemCheck | None:
    """What the data scan asks of each item beyond its DataModel: for a ``[choices]`` run,
    its choices and a gold choice among them (else every such item would be an ERROR
    session after the model was paid for its log-likelihoods)."""
    choices = config.choices
    if choices is None:
        return None
    return functools.partial(check_item, cfg=choices)


def check_judge_model(config: ApeConfig, judge: JudgeSpec | None) -> None:
    """Build a judge's own model (``[checker.judge]``) as the ``[[model]]`` sections are built,
    so a model that cannot work there (an unknown mock behaviour, a missing key) is one line
    naming ``[checker.judge]`` before any model call, not a check error on every item."""
    if judge is None or not judge.own_model:
        return  # no judge, or a judge that names a [[model]] (built with the others)
    model_cfg = judge.model_cfg
    try:
        build_model(model_cfg, config.base_dir)
    except ApeError as exc:
        exc.where = (exc.where or "").replace(f"[model] '{model_cfg.model_id}'", "[checker.judge]", 1)
        raise


def canary(config: ApeConfig, checked: Checked | None = None) -> list[Any]:
    """Grade the checker's known answers (``ape.tasks.checking.canary``) before any model call;
    the returned list holds the graded examples (empty for a checker without any).
    ``checked``: what :func:`preflight` resolved for this config, whose checker the canary
    then grades (instead of resolving the data model and checker once more).

    Raises:
        CanaryFailed: one line naming the checker, the example and the cause.
        ApeError: a ``[[checker.canary]]`` item that does not fit the DataModel.
    """
    try:
        return grade_canary(config, checked.setups[0] if checked is not None and checked.setups else None)
    except ApeError as exc:
        raise locate(exc, config) from None


def graded_canary(config: ApeConfig, checked: Checked | None = None) -> Checked | None:
    """The canary of a run, graded once: ``checked`` as it is when its canary was graded
    already, else graded now (:func:`canary`; the line saying how many known answers came out
    as expected is written here) and returned with its result. ``checked`` None (a flow run
    handed no preflight): the canary is graded with the checker resolved here, None returned.

    Raises:
        CanaryFailed: one line naming the checker, the example and the cause.
    """
    if checked is not None and checked.graded is not None:
        return checked
    graded = canary(config, checked)
    if graded:
        log.info("canary: the checker graded %d known answers as expected", len(graded))
    return None if checked is None else dataclasses.replace(checked, graded=graded)


def endpoints(config: ApeConfig, only_models: list[str] | None = None) -> None:
    """One cheap request to the endpoint of every model the run will call over the network
    (``[[model]]`` sections, ``only_models`` of them when given, and a ``[checker.judge]``
    block), all at once, before any session: a dead ``base_url`` is one line naming the
    model, the URL and the cause, instead of every session failing after its retries.
    An endpoint that answers 401/403 is a warning (:mod:`ape.tasks.models.limits.reachability`).

    Raises:
        ApeError: an endpoint that could not be reached (exit code 2; nothing has run).
    """
    models = [m for m in config.model if not only_models or m.model_id in only_models]
    judge = config.checker.judge if config.checker.implementation == "judge" else None
    judged = [judge] if isinstance(judge, ModelConfig) else []
    targets = {id(cfg): probe_target(cfg) for cfg in [*models, *judged]}
    probes = probe_all(t for t in targets.values() if t is not None)
    for line in [*auth_warnings(probes), *path_warnings(probes)]:
        log.warning("%s", line)
    for found in probes:
        log.debug("endpoint of %s: %s in %.3f s", found.target.model_id, found.status or found.cause, found.seconds)
    dead = [p for p in probes if not p.reachable]
    if not dead:
        return
    first = dead[0].target
    is_judge = bool(judged) and targets.get(id(judged[0])) is first
    with_key = any(m.model_id == first.model_id and m.base_url for m in models) or (is_judge and judged[0].base_url)
    where = "[checker.judge]" if is_judge else f"[model] '{first.model_id}'"
    lines = unreachable_lines(dead)
    message = lines[0].split(": ", 1)[1] + "".join(f"; also {line}" for line in lines[1:])
    error = ApeError(
        message,
        where=where + (" base_url" if with_key else ""),
        hint="start the server there, or correct base_url; nothing was run",
    )
    raise locate(error, config) from None
