"""config.toml described from its pydantic models, so no description of it can drift.

Two views of :class:`ape.schemas.config.ApeConfig`:

- :func:`json_schema`: a JSON Schema for TOML editors. taplo and Even Better TOML (VS Code)
  read a ``#:schema PATH`` comment at the top of a file, then complete keys, show each
  key's description and mark unknown keys and wrong types while you type. ``ape schema``
  writes it; ``schemas/config.schema.json`` (installed as ``ape/schemas/``) is the copy the
  shipped examples point at, and a test keeps it equal to what ``ape schema`` writes.
- :func:`reference_markdown` and :func:`fields_markdown`: the tables of the docs' config
  reference (key, type, default, allowed values, description), rendered from the models
  each time the docs are built (``docs/hooks.py``), so the page is never a stale copy.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ape.schemas.config import ApeConfig

INTERNAL = frozenset({"base_dir", "config_file"})  # set by the loader, never written in a file
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "config.schema.json"
SCHEMA_URL = "https://json-schema.org/draft/2020-12/schema"
# What the loader fills in where the model's own default would mislead a reader of the file.
_LOADER_DEFAULTS = {("ApeConfig", "name"): "the config file's name without `.toml`"}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a config.toml file: keys as written (``schema``, ``class``),
    the loader's internal keys left out, and ``model`` as one table or an array of them."""
    schema = ApeConfig.model_json_schema(by_alias=True, mode="validation")
    properties = schema["properties"]
    for key in INTERNAL:
        properties.pop(key, None)
    schema["required"] = [key for key in schema.get("required", []) if key not in INTERNAL]
    model = properties["model"]
    properties["model"] = {
        "description": model.get("description", ""),
        "anyOf": [model["items"], {"type": "array", "items": model["items"]}],
    }
    properties["name"].pop("default", None)  # the loader names a benchmark after its file
    if "choices" in properties and "checker" in schema["required"]:  # [choices] brings its own checker
        schema["required"].remove("checker")
        schema["anyOf"] = [{"required": ["checker"]}, {"required": ["choices"]}]
    if "task" in properties:  # [task] lm_eval brings its own data, prompt and checker (the loader fills them)
        own = [key for key in ("data", "prompt") if key in schema["required"]]
        schema["required"] = [key for key in schema["required"] if key not in own]
        schema["if"] = {"not": {"required": ["task"]}}
        schema["then"] = {"required": own, **({"anyOf": schema.pop("anyOf")} if "anyOf" in schema else {})}
    properties["name"]["description"] += " Default: the config file's name without .toml."
    return {"$schema": SCHEMA_URL, **schema, "title": "APE config.toml"}


def schema_text() -> str:
    """:func:`json_schema` as the text ``ape schema`` writes (stable key order, final newline)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------ markdown reference


def reference_markdown(heading: str = "##") -> str:
    """Every section of config.toml as a table of its keys, in the order of the model."""
    blocks = [f"{heading} Top level\n\n" + _table(ApeConfig, [n for n, _ in _scalars(ApeConfig)])]
    for header, model, same_as in sections():
        if same_as is not None:
            blocks.append(f"{heading} `{header}`\n\nThe keys of `{same_as}`, above.")
            continue
        doc = _first_paragraph(model.__doc__)
        blocks.append(f"{heading} `{header}`\n\n" + (f"{doc}\n\n" if doc else "") + fields_markdown(model))
    return "\n\n".join(blocks) + "\n"


def sections() -> Iterator[tuple[str, type[BaseModel], str | None]]:
    """(TOML header, model, header it repeats) of every table a config may hold, nested ones
    after their parent; a model met again (``[checker.judge]`` takes the keys of
    ``[[model]]``) names the header it was first listed under instead of its keys."""
    seen: dict[type[BaseModel], str] = {}

    def walk(prefix: str, model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel], str | None]]:
        for name, field in model.model_fields.items():
            found = section_model(field.annotation)
            if name in INTERNAL or found is None:
                continue
            key = f"{prefix}{field.alias or name}"
            header = f"[[{key}]]" if _is_list(field.annotation) else f"[{key}]"
            if get_origin(field.annotation) is dict:
                header = f"[{key}.NAME]"
            if found in seen:
                yield header, found, seen[found]
                continue
            seen[found] = header
            yield header, found, None
            yield from walk(f"{key}.", found)

    yield from walk("", ApeConfig)


def fields_markdown(model: type[BaseModel], *, defaults: bool = True) -> str:
    """The table of one model's keys (a config section, a built-in's ``args``, a row of an
    output file); without ``defaults``, only key, type and description."""
    names = [name for name in model.model_fields if name not in INTERNAL]
    return _table(model, names, defaults=defaults)


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``list[ModelConfig]``, ``str | ModelConfig``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = section_model(arg)
        if found is not None:
            return found
    return None


def _scalars(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    return [(n, f) for n, f in model.model_fields.items() if n not in INTERNAL and section_model(f.annotation) is None]


def _is_list(annotation: Any) -> bool:
    return get_origin(annotation) is list or any(_is_list(a) for a in get_args(annotation) if a is not type(None))


def _table(model: type[BaseModel], names: list[str], *, defaults: bool = True) -> str:
    head = "| key | type | default | allowed | description |\n|---|---|---|---|---|"
    if not defaults:
        head = "| key | type | description |\n|---|---|---|"
    rows = []
    for name in names:
        field = model.model_fields[name]
        key = f"`{field.alias or name}`"
        kind = type_name(field.annotation)
        text = _cell(field.description or "", prose=True)
        if defaults:
            shown = _LOADER_DEFAULTS.get((model.__name__, name)) or default_text(field)
            rows.append(f"| {key} | {kind} | {_cell(shown)} | {_cell(allowed_text(field))} | {text} |")
        else:
            rows.append(f"| {key} | {kind} | {text} |")
    return head + "\n" + "\n".join(rows)


def type_name(annotation: Any) -> str:
    """A TOML reader's name for a field's type: string, integer, number, boolean, path,
    table, array of ..., joined with "or" for unions (None left out: it means unset)."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        parts = [type_name(a) for a in get_args(annotation) if a is not type(None)]
        return " or ".join(dict.fromkeys(parts))
    if origin is Literal:
        kinds = {type_name(type(value)) for value in get_args(annotation)}
        return " or ".join(sorted(kinds))
    if origin in (list, tuple, set, frozenset):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return f"array of {_plural(type_name(args[0]))}" if args else "array"
    if origin is dict:
        value = get_args(annotation)[1] if len(get_args(annotation)) == 2 else Any
        return "tables by name" if section_model(value) is not None else "table"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "table"
        if issubclass(annotation, Path):
            return "path"
        for base, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
            if issubclass(annotation, base):
                return name
    return "any"


def _plural(name: str) -> str:
    return {"table": "tables", "string": "strings", "integer": "integers", "number": "numbers"}.get(name, name)


def default_text(field: FieldInfo) -> str:
    """How a field's default reads in TOML: ``true``, ``4``, ``"output"``, unset, required."""
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(its keys' defaults)"
    else:
        value = field.default
    return _toml_value(value)


def _toml_value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"
    if isinstance(value, str | Path):
        return "`" + json.dumps(str(value), ensure_ascii=False) + "`"
    if isinstance(value, dict | list) and not value:
        return "`{}`" if isinstance(value, dict) else "`[]`"
    return f"`{value!r}`"


def allowed_text(field: FieldInfo) -> str:
    """Allowed values: a literal's choices and numeric bounds or a pattern from the field."""
    parts: list[str] = []
    literals = [v for v in _literal_values(field.annotation)]
    if literals:
        parts.append(", ".join(_toml_value(v) for v in literals))
    bounds = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    for meta in field.metadata:
        for attr, sign in bounds.items():
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value:g}")
        pattern = getattr(meta, "pattern", None)
        if pattern:
            parts.append(f"matches `{pattern}`")
    return "; ".join(parts)


def _literal_values(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    values: list[Any] = []
    for arg in get_args(annotation):
        values += _literal_values(arg)
    return values


def _cell(text: str, *, prose: bool = False) -> str:
    """Text that stays inside one markdown table cell; ``prose`` (not inside backticks) also
    keeps ``<run id>`` from reading as an HTML tag."""
    text = text.replace("\n", " ").replace("|", "\\|")
    return text.replace("<", "&lt;").replace(">", "&gt;") if prose else text


def _first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line, without a leading "``[data]``: " (the
    heading above it already names the table)."""
    if not doc:
        return ""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    if text.startswith("``") and "``: " in text:
        rest = text.split("``: ", 1)[1]
        text = rest[:1].upper() + rest[1:]
    return text
