"""A mock's arguments that name the data, checked against the data before any session.

A mock is built without the data, so its own validation cannot see that an ``oracle``'s
``field = "answers"`` names no field of the items (they have ``answer``), or that a
``scripted`` table keyed ``FR`` answers no item (the id is ``fr``): ``ape validate`` said ok
and every session of ``ape run`` ended in an error. :func:`check_mock_data` runs where the
data has been scanned (:func:`ape.flows.preflight.preflight`) and turns each into one line
naming the key, with a did-you-mean or a case hint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError, did_you_mean

__all__ = ["check_mock_data"]

# the oracle's arguments that name an item field
_FIELD_ARGS = ("field", "choices")
# the mock's tables keyed by item id
_TABLES_BY_ID = ("responses", "steps")


def _field_names(data_model: type[BaseModel]) -> list[str]:
    """The names an item answers to: its fields, their aliases, and its properties."""
    names = set(data_model.model_fields)
    names |= {info.alias for info in data_model.model_fields.values() if info.alias}
    names |= {name for name in dir(data_model) if isinstance(getattr(data_model, name, None), property)}
    return sorted(names)


def _unknown_field(cfg: ModelConfig, key: str, name: str, data_model: type[BaseModel]) -> ApeError:
    fields = _field_names(data_model)
    hint = did_you_mean(name, fields)
    listed = f"the items' fields: {', '.join(fields)}"
    return ApeError(
        f"'{name}' is not a field of the items ({data_model.__name__})",
        where=f"[model] '{cfg.model_id}' args.{key}",
        hint=f"{hint} ({listed})" if hint else listed,
    )


def _unknown_id(cfg: ModelConfig, table: str, key: str, ids: list[str]) -> ApeError:
    same_but_case = [i for i in ids if i.lower() == key.lower()]
    if same_but_case:
        hint = f"item ids are case-sensitive: the item's id is '{same_but_case[0]}'"
    else:
        hint = (
            did_you_mean(key, ids)
            or f"the table is keyed by item id ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
        )
    return ApeError(
        f"'{key}' is no item id of the data",
        where=f"[model] '{cfg.model_id}' args.{table}",
        hint=hint,
    )


def check_mock_data(cfg: ModelConfig, data_model: type[BaseModel], ids: Iterable[str], *, sliced: bool) -> None:
    """Refuse a mock whose ``field``/``choices`` name no item field, or whose ``responses`` or
    ``steps`` table has a key that is no item id. ``ids``: the item ids the run will answer;
    ``sliced``: only part of the file (``start_id``/``end_id``), so a key outside it is not an
    error unless it differs from an id only in case."""
    if (cfg.provider or "").strip().lower() != "mock" or cfg.class_ is not None:
        return
    args: Mapping[str, Any] = cfg.args
    behaviour = args.get("behaviour") or cfg.model
    if behaviour == "oracle":
        fields = _field_names(data_model)
        for key in _FIELD_ARGS:
            name = args.get(key)
            if isinstance(name, str) and name not in fields:
                raise _unknown_field(cfg, key, name, data_model)
    known = [str(i) for i in ids]
    present = set(known)
    lowered = {i.lower() for i in known}
    for table in _TABLES_BY_ID:
        value = args.get(table)
        if not isinstance(value, Mapping):
            continue
        for key in map(str, value):
            if key in present or (sliced and key.lower() not in lowered):
                continue
            raise _unknown_id(cfg, table, key, known)
