"""lm-evaluation-harness tasks compiled into APE data files (``[task] lm_eval``).

The harness (the optional ``lm_eval`` extra) builds every document's request with its own
code: the task's YAML and its ``include``s and ``!function`` hooks, its few-shot sampler
(seeded as ``lm_eval.simple_evaluate`` seeds it), its prompt template and its generation
arguments. This module only writes those requests down, one :class:`ape.schemas.lm_eval.LmEvalItem`
per document, into ``OUTPUT/lm_eval/<task>-<hash>.jsonl``: the name holds a hash of the
content, so an unchanged task gives the same file (resume and the result cache hold), and a
changed one a new file (the saved results are then refused as made with other data).

``multiple_choice`` tasks become items with the harness's choices and gold, which APE scores
as a ``[choices]`` run does (:func:`choices_section`): every continuation's log-likelihood
after the harness's context, continuations ``target_delimiter + choice`` as the harness
builds them. What APE cannot run is refused here, before any model call, in one line naming
the task, the feature and what to do: ``loglikelihood`` and ``loglikelihood_rolling`` tasks,
several contexts per document (WinoGrande), ``acc_mutual_info``, repeated generations
(``repeats``), images and audio, and tasks that execute model code.

The loaded tasks are kept per process (:func:`load_tasks`), so the checker of every
session scores with the same task objects instead of loading the data set again.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
import os
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from ape.schemas.choices import ChoicesConfig
from ape.schemas.config import TaskConfig
from ape.schemas.errors import ApeError

ITEM_SCHEMA = "ape.schemas.lm_eval:LmEvalItem"
CHECKER = "ape.tasks.checking.lm_eval_check:LmEvalChecker"
TEMPLATE = "{{context}}"
WHERE = "[task] lm_eval"
INSTALL_HINT = "install the harness: pip install -e '.[lm_eval]' (or pip install lm-eval)"
_SUFFIX_LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
_LOCK = threading.Lock()


def harness() -> Any:
    """The ``lm_eval`` package; an ApeError saying how to install it when it is missing."""
    try:
        return importlib.import_module("lm_eval")
    except ImportError:
        raise ApeError("lm-evaluation-harness is not installed", where=WHERE, hint=INSTALL_HINT) from None


def is_task_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml"))


@lru_cache(maxsize=4)
def _manager(include_path: str | None) -> Any:
    """The harness's task index (reading its ~14,000 YAML files takes seconds: once a process)."""
    harness()
    importlib.import_module("datasets").disable_progress_bars()  # APE's own progress bar is the one shown
    tasks = importlib.import_module("lm_eval.tasks")
    return tasks.TaskManager(include_path=include_path)


def _local_path(value: str, base_dir: Path) -> str:
    """``value`` resolved against the config's folder when it names something there."""
    path = (base_dir / value).expanduser()
    return str(path.resolve()) if path.exists() else value


def _data_files(value: str | list[str] | dict[str, Any], base_dir: Path) -> Any:
    if isinstance(value, dict):
        return {split: _data_files(files, base_dir) for split, files in value.items()}
    if isinstance(value, list):
        return [str((base_dir / f).resolve()) for f in value]
    return str((base_dir / value).resolve())


def _first_file(files: Any) -> str:
    while isinstance(files, dict | list):
        files = next(iter(files.values() if isinstance(files, dict) else files), "")
    return str(files)


def overrides(cfg: TaskConfig, base_dir: Path) -> dict[str, Any]:
    """The task-config keys that replace the task's own: ``options``, then the data set."""
    found: dict[str, Any] = dict(cfg.options)
    if cfg.data_files is not None:
        files = _data_files(cfg.data_files, base_dir)
        missing = [f for f in _all_files(files) if not Path(f).is_file()]
        if missing:
            raise ApeError(
                f"file not found: {missing[0]}",
                where="[task] data_files",
                hint="paths are relative to the config file's folder",
            )
        loader = cfg.dataset_path or _SUFFIX_LOADERS.get(Path(_first_file(files).removesuffix(".gz")).suffix)
        if loader is None:
            raise ApeError(
                f"cannot tell the format of {_first_file(files)}",
                where="[task] data_files",
                hint="name the loader: dataset_path = 'json', 'csv' or 'parquet'",
            )
        found.update(dataset_path=loader, dataset_name=None, dataset_kwargs={"data_files": files})
    elif cfg.dataset_path is not None:
        found["dataset_path"] = _local_path(cfg.dataset_path, base_dir)
        if Path(found["dataset_path"]).is_dir():
            found["dataset_kwargs"] = {
                **found.get("dataset_kwargs", {}),
                "cache_dir": folder_cache(found["dataset_path"]),
            }
    return found


def folder_cache(folder: str) -> str:
    """A cache folder of the ``datasets`` library for one state of a local dataset folder.

    ``datasets`` (5.2) keys the cache of a local folder by its name and configuration, not
    by its files: a changed or another folder of the same name was read back from the cache
    as it was first read (seen in the benchmark, 570 rows served for 14,042). Keyed here by
    every file's path, size and modification time, a changed folder is read afresh."""
    root = Path(folder)
    digest = hashlib.sha256(str(root.resolve()).encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    datasets_config = importlib.import_module("datasets.config")
    return str(Path(datasets_config.HF_DATASETS_CACHE) / "ape-local-folders" / digest.hexdigest()[:16])


def _all_files(files: Any) -> list[str]:
    if isinstance(files, dict):
        return [f for value in files.values() for f in _all_files(value)]
    return list(files) if isinstance(files, list) else [files]


def cache_key(cfg: TaskConfig, base_dir: Path) -> str:
    return json.dumps([cfg.model_dump(mode="json"), str(base_dir)], sort_keys=True)


def load_tasks(cfg: TaskConfig, base_dir: Path) -> dict[str, Any]:
    """The harness's task dict (``{"tasks", "groups", "group_map"}``) for ``[task]``, with
    ``num_fewshot`` set as ``simple_evaluate`` sets it; loaded once per process.

    Raises:
        ApeError: the harness missing, an unknown task name (with close names), a task
            file that does not load, a data set that cannot be read.
    """
    with _LOCK:
        return _load_tasks(cache_key(cfg, base_dir))


@lru_cache(maxsize=8)
def _load_tasks(key: str) -> dict[str, Any]:
    raw, base = json.loads(key)
    cfg = TaskConfig.model_validate(raw)
    base_dir = Path(base)
    name = cfg.lm_eval
    if is_task_file(name):
        path = (base_dir / name).resolve()
        if not path.is_file():
            raise ApeError(
                f"task file not found: {path}", where=WHERE, hint="paths are relative to the config file's folder"
            )
        manager = _manager(str(path.parent))
        entry = importlib.import_module("lm_eval.tasks._index").TaskIndex.entry_from_path(path)
        if entry is not None and not isinstance(entry.name, str):  # a group file, named by its task list
            raw_file = importlib.import_module("lm_eval.tasks._yaml_loader").load_yaml(path, resolve_func=False)
            entry = manager.task_index.get(str(raw_file.get("group")))  # indexed: its folder is the include path
        if entry is None:
            raise ApeError(f"{path} holds no 'task' or 'group' key", where=WHERE)
    else:
        manager = _manager(None)
        entry = manager.task_index.get(name)
        if entry is None:
            close = difflib.get_close_matches(name, manager.all_tasks, n=3, cutoff=0.6)
            raise ApeError(
                f"unknown lm-evaluation-harness task '{name}'",
                where=WHERE,
                hint=(f"close names: {', '.join(close)}" if close else "no close name")
                + "; list them with: python -m lm_eval ls tasks",
            )
    found = overrides(cfg, base_dir)
    raw_cfg = {**(entry.cfg or {}), **found}
    if "task" in raw_cfg and "group" not in raw_cfg:  # one task: refused before its data set is read
        refuse_unsupported(name, raw_cfg.get)
    built = _build(manager, entry, found, name)
    loaded: dict[str, Any] = manager.load([built])
    for task in loaded["tasks"].values():
        if cfg.num_fewshot is not None and task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=cfg.num_fewshot)
        elif task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
    return loaded


def _build(manager: Any, entry: Any, found: dict[str, Any], name: str) -> Any:
    """The task or group built by the harness's own factory with the overrides applied
    (its public ``load`` takes a name or an inline config, and an inline config does not
    inherit the named task's)."""
    try:
        return manager._factory.build(entry, overrides=found or None, registry=manager._index)
    except ApeError:
        raise
    except Exception as exc:  # the data set, a hook, a malformed YAML: the harness's own words
        raise load_error(name, {**(entry.cfg or {}), **found}, exc) from None


def load_error(name: str, raw_cfg: dict[str, Any], exc: Exception) -> ApeError:
    """The one line for a task that did not load, naming its data set where it has one."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    dataset = raw_cfg.get("dataset_path")
    if isinstance(exc, KeyError) and dataset in _SUFFIX_LOADERS.values():
        return ApeError(
            f"task '{name}' reads the split {first} that [task] data_files does not name",
            where="[task] data_files",
            hint="give a file for every split the task reads (test_split, and training_split or fewshot_split "
            "for few-shot examples)",
        )
    if dataset and not Path(str(dataset)).exists() and dataset not in _SUFFIX_LOADERS.values():
        config_name = raw_cfg.get("dataset_name")
        splits = ", ".join(str(raw_cfg[k]) for k in ("test_split", "validation_split") if raw_cfg.get(k))
        return ApeError(
            f"task '{name}': the data set '{dataset}'"
            + (
                f" (configuration '{config_name}'" + (f", split {splits}" if splits else "") + ")"
                if config_name
                else ""
            )
            + f" is neither cached nor given ({type(exc).__name__}: {first})",
            where=WHERE,
            hint="give it as local files with [task] data_files (or dataset_path = a local copy of the "
            "data set's folder), or fill the Hugging Face cache where there is a network and set HF_DATASETS_OFFLINE=1",
        )
    unreachable = isinstance(exc, ConnectionError | FileNotFoundError) or "DatasetNotFound" in type(exc).__name__
    return ApeError(
        f"task '{name}' did not load: {type(exc).__name__}: {first}",
        where=WHERE,
        hint="a group's subtasks read their own data sets: give a local copy of each with [task] dataset_path "
        "(a folder whose README names one configuration per subtask), or fill the Hugging Face cache and set "
        "HF_DATASETS_OFFLINE=1"
        if unreachable
        else None,
    )


def refuse_unsupported(name: str, setting: Callable[[str], Any], flags: Any = None) -> None:
    """One line naming the task, the feature and what to do for what APE cannot run.
    ``setting``: the task config's value of a key (a built task's ``get_config``, or a raw
    config's ``get`` before its data set is loaded); ``flags``: the built task, whose class
    says whether it shows images or runs code."""
    kind = setting("output_type") or getattr(flags, "OUTPUT_TYPE", None) or "generate_until"
    if kind not in ("generate_until", "multiple_choice", "loglikelihood"):
        raise ApeError(
            f"task '{name}' is a {kind} task, and APE runs the generate_until, multiple_choice and "
            "loglikelihood tasks of lm-evaluation-harness",
            where=WHERE,
            hint="pick a multiple-choice or generative variant of the task, or run it with lm_eval itself",
        )
    if kind == "multiple_choice":
        _refuse_choice_features(name, setting, flags)
    repeats = setting("repeats") or 1
    if repeats != 1:
        raise ApeError(
            f"task '{name}' asks {repeats} generations per document (repeats), which APE does not run",
            where=WHERE,
            hint="set [task] options = {repeats = 1}, or run the task with lm_eval itself",
        )
    if getattr(flags, "MULTIMODAL", False) or setting("doc_to_image") or setting("doc_to_audio"):
        raise ApeError(
            f"task '{name}' shows images or audio, which APE does not send", where=WHERE, hint="pick a text task"
        )
    if getattr(flags, "UNSAFE_CODE", False) or (setting("metadata") or {}).get("unsafe_code"):
        raise ApeError(
            f"task '{name}' runs the model's code outside a sandbox",
            where=WHERE,
            hint="run code tasks with APE's code_exec checker ([sandbox], examples/humaneval)",
        )


def _refuse_choice_features(name: str, setting: Callable[[str], Any], flags: Any) -> None:
    """What a multiple-choice task may ask that APE's log-likelihood scoring does not do."""
    if getattr(flags, "multiple_input", False):
        raise ApeError(
            f"task '{name}' scores one continuation after several contexts (one per choice, as WinoGrande), "
            "and APE scores several continuations after one context",
            where=WHERE,
            hint="run this task with lm_eval itself, or its generative variant where the harness has one",
        )
    metrics = [m.get("metric") for m in setting("metric_list") or [] if isinstance(m, dict)]
    if "acc_mutual_info" in metrics:
        raise ApeError(
            f"task '{name}' asks acc_mutual_info (each choice's log-likelihood without the context), "
            "which APE does not score",
            where=WHERE,
            hint="drop it with [task] options = { metric_list = [{ metric = 'acc' }, { metric = 'acc_norm' }] }",
        )


def build_requests(task: Any, limit: int | None, seed: int) -> list[Any]:
    """The task's instances, built as ``lm_eval.evaluator.evaluate`` builds them (one rank)."""
    sample_size = importlib.import_module("lm_eval.evaluator_utils").get_sample_size
    task.set_fewshot_seed(seed=seed)  # the sampler's state starts afresh, so every build is the same
    task.build_all_requests(limit=sample_size(task, limit))
    return list(task.instances)


def item_lines(cfg: TaskConfig, base_dir: Path) -> list[str]:
    """One JSON line per document of every task of ``[task]`` (sorted by task name)."""
    loaded = load_tasks(cfg, base_dir)
    lines: list[str] = []
    with _LOCK:
        for name in sorted(loaded["tasks"]):
            task = loaded["tasks"][name]
            refuse_unsupported(name, task.get_config, task)
            instances = build_requests(task, cfg.limit, cfg.fewshot_seed)
            if task.OUTPUT_TYPE == "multiple_choice":
                items = [_choice_item(name, task, group) for group in _by_document(instances)]
            elif task.OUTPUT_TYPE == "loglikelihood":
                items = [_continuation_item(name, task, instance) for instance in instances]
            else:
                items = [_item(name, task, instance) for instance in instances]
            lines.extend(json.dumps(item, ensure_ascii=False, default=str) for item in items)
    if not lines:
        raise ApeError(f"task '{cfg.lm_eval}' has no documents to evaluate", where=WHERE)
    return lines


def _item(name: str, task: Any, instance: Any) -> dict[str, Any]:
    context, gen_kwargs = instance.args
    kwargs = dict(gen_kwargs)
    until = kwargs.pop("until", [])
    until = [until] if isinstance(until, str) else list(until)
    target = task.doc_to_target(instance.doc)
    return {
        "id": f"{name}/{instance.doc_id}",
        "task": name,
        "doc_id": instance.doc_id,
        "context": context,
        "until": until,
        "generation_kwargs": json.loads(json.dumps(kwargs, default=str)),
        "target": target if isinstance(target, str) else json.dumps(target, default=str),
        "doc": json.loads(json.dumps(dict(instance.doc), default=str)),
    }


def _by_document(instances: list[Any]) -> list[list[Any]]:
    """A multiple-choice task's instances (one per choice) grouped by document, in order."""
    groups: dict[int, list[Any]] = {}
    for instance in instances:
        groups.setdefault(instance.doc_id, []).append(instance)
    return [sorted(group, key=lambda i: i.idx) for group in groups.values()]


def _gold(target: Any, choices: list[str]) -> int:
    """The gold choice's index as the harness reads ``doc_to_target`` (an index, a choice's
    text, or a list of right choices, whose first stands for them); -1 when none fits."""
    first = target[0] if isinstance(target, list) and target else target
    if isinstance(first, str):
        return choices.index(first) if first in choices else -1
    return first if isinstance(first, int) and 0 <= first < len(choices) else -1


def _choice_item(name: str, task: Any, instances: list[Any]) -> dict[str, Any]:
    """One document of a ``multiple_choice`` task: the context, the choices, the gold.

    APE scores ``delimiter + choice`` after the context (``[choices]``); that must be the
    very continuation the harness built, or the document is refused."""
    doc = instances[0].doc
    choices = [str(c) for c in task.doc_to_choice(doc)]
    delimiter = str(task.config.target_delimiter)
    built = [instance.args[1] for instance in instances]
    if built != [delimiter + choice for choice in choices] or len({i.args[0] for i in instances}) != 1:
        raise ApeError(
            f"task '{name}' document {instances[0].doc_id}: the harness's continuations are not "
            "target_delimiter + choice after one context, which is what APE scores",
            where=WHERE,
            hint="run this task with lm_eval itself",
        )
    target = task.doc_to_target(doc)
    return {
        "id": f"{name}/{instances[0].doc_id}",
        "task": name,
        "doc_id": instances[0].doc_id,
        "context": instances[0].args[0],
        "target": target if isinstance(target, str) else json.dumps(target, default=str),
        "doc": json.loads(json.dumps(dict(doc), default=str)),
        "choices": choices,
        "gold": _gold(target, choices),
    }


def _continuation_item(name: str, task: Any, instance: Any) -> dict[str, Any]:
    """One document of a ``loglikelihood`` task (LAMBADA): its one continuation, scored as a
    ``[choices]`` item of one choice (the gold) after the context with no delimiter, since
    the harness scores ``doc_to_target`` itself after the context."""
    context, continuation = instance.args
    return {
        "id": f"{name}/{instance.doc_id}",
        "task": name,
        "doc_id": instance.doc_id,
        "context": context,
        "target": continuation,
        "doc": json.loads(json.dumps(dict(instance.doc), default=str)),
        "choices": [continuation],
        "gold": 0,
    }


def choices_section(cfg: TaskConfig, base_dir: Path) -> ChoicesConfig | None:
    """The ``[choices]`` a multiple-choice task stands for (None for generate_until tasks):
    the items' choices after the task's ``target_delimiter``, scored by log-likelihood.

    Raises:
        ApeError: a group that mixes both kinds, or whose tasks put different delimiters.
    """
    tasks = load_tasks(cfg, base_dir)["tasks"]
    kinds = {name: task.OUTPUT_TYPE for name, task in tasks.items()}
    if all(kind == "generate_until" for kind in kinds.values()):
        return None
    if len(set(kinds.values())) > 1:
        shown = ", ".join(f"{n} ({k})" for n, k in sorted(kinds.items())[:4])
        raise ApeError(
            f"task '{cfg.lm_eval}' mixes tasks of different kinds ({shown}), and a run is either generated, "
            "scored by choices or scored by one continuation",
            where=WHERE,
            hint="run the tasks of each kind in a config of their own",
        )
    if "loglikelihood" in kinds.values():  # one continuation, the harness's own, after the context
        return ChoicesConfig(field="choices", gold="gold", gold_is="index", delimiter="", min_choices=1)
    delimiters = {str(task.config.target_delimiter) for task in tasks.values()}
    if len(delimiters) > 1:
        raise ApeError(
            f"task '{cfg.lm_eval}' groups tasks with different target delimiters ({sorted(delimiters)})",
            where=WHERE,
            hint="run the tasks of each delimiter in a config of their own",
        )
    return ChoicesConfig(field="choices", gold="gold", gold_is="index", delimiter=delimiters.pop())


def compile_items(cfg: TaskConfig, base_dir: Path, output: Path) -> Path:
    """Write the items of ``[task]`` to ``output/lm_eval/<task>-<hash>.jsonl`` (once: an
    existing file of that name holds the same content) and return its path."""
    text = "".join(line + "\n" for line in item_lines(cfg, base_dir))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    stem = Path(cfg.lm_eval).stem if is_task_file(cfg.lm_eval) else cfg.lm_eval
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)
    path = output / "lm_eval" / f"{slug}-{digest}.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    return path


# the generation arguments APE sends, as request fields; every other one is only recorded
_SENT = ("until", "max_gen_toks", "do_sample", "temperature")


def _asks(kwargs: dict[str, Any]) -> dict[str, Any]:
    """One task's ``generation_kwargs`` as request fields: ``until`` as ``stop``,
    ``max_gen_toks`` as ``max_tokens``, greedy decoding (``do_sample`` false, or a zero
    temperature) as ``temperature = 0``, a sampled one's temperature as it is."""
    asks: dict[str, Any] = {}
    if kwargs.get("until"):
        until = kwargs["until"]
        asks["stop"] = [until] if isinstance(until, str) else [str(u) for u in until]
    if isinstance(kwargs.get("max_gen_toks"), int):
        asks["max_tokens"] = kwargs["max_gen_toks"]
    temperature = kwargs.get("temperature")
    if kwargs.get("do_sample") is False or temperature == 0:
        asks["temperature"] = 0.0
    elif isinstance(temperature, int | float):
        asks["temperature"] = float(temperature)
    return asks


def generation_asks(cfg: TaskConfig, base_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """What the generate_until tasks of ``[task]`` ask of each request (``stop``,
    ``max_tokens``, ``temperature``; only where every such task asks the same value, since
    a run sends one setting for all its items), and one line per task for what is not
    sent: other generation arguments, and values the subtasks of a group do not share."""
    tasks = {n: t for n, t in load_tasks(cfg, base_dir)["tasks"].items() if t.OUTPUT_TYPE == "generate_until"}
    per_task = {name: dict(task.config.generation_kwargs or {}) for name, task in sorted(tasks.items())}
    asked = {name: _asks(kwargs) for name, kwargs in per_task.items()}
    agreed: dict[str, Any] = {}
    for field in ("stop", "max_tokens", "temperature"):
        values = [a.get(field) for a in asked.values()]
        if values and values[0] is not None and all(v == values[0] for v in values):
            agreed[field] = values[0]
    lines = []
    for name, kwargs in per_task.items():
        unsent = {k: v for k, v in kwargs.items() if k not in _SENT}
        differing = [f for f in asked[name] if f not in agreed]
        parts = [f"{k} = {v!r}" for k, v in sorted(unsent.items())]
        parts += [f"{f} = {asked[name][f]!r} (the group's tasks differ)" for f in differing]
        if parts:
            lines.append(
                f"task '{name}' asks {', '.join(parts)}: not sent; the model's own settings apply, "
                "and the prompt is sent without the harness's chat template"
            )
    lines = lines[:3] + ([f"... and {len(lines) - 3} more tasks alike"] if len(lines) > 3 else [])
    return agreed, lines


def fill_sections(raw: dict[str, Any], where: str) -> None:
    """Give a config with ``[task] lm_eval`` the sections the task stands for (before
    validation): the item schema, the pass-through prompt, the raw adapter and the
    harness's checker. The data file is set once the task is compiled (:func:`compile_items`).

    Raises:
        ApeError: ``[data]``, ``[prompt]``, ``[adapter]`` or ``[checker]`` given beside ``[task]``.
    """
    given = [key for key in ("data", "prompt", "adapter", "checker", "choices") if key in raw]
    if given:
        raise ApeError(
            f"[task] lm_eval replaces [{given[0]}]: the harness's task gives the data, prompt and scoring",
            where=where,
            hint=f"remove [{given[0]}], or remove [task] to run your own data",
        )
    raw["data"] = {"file": "lm_eval.jsonl", "schema": ITEM_SCHEMA, "category_field": "task"}
    raw["prompt"] = {"template": TEMPLATE}
    raw["adapter"] = {"implementation": "raw"}
    raw["checker"] = {"implementation": CHECKER}


def checker_args(cfg: TaskConfig, base_dir: Path) -> dict[str, Any]:
    """``[checker] args`` of the harness's checker: the task section and the config's folder."""
    return {"task": cfg.model_dump(mode="json"), "base_dir": str(base_dir)}
