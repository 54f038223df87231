"""User DataModels: the base class to subclass, and marking the identifier field."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, Field

ID_MARKER = "ape_id"


class DataModel(BaseModel):
    """Base of a benchmark's data items (``[data] schema = "module:MyItem"``).

    A plain pydantic model: any ``BaseModel`` subclass works as a schema too; this name
    exists so a plugin can write ``class MyItem(ape.DataModel)`` and read as what it is.
    The identifier is the field ``id``, or the one declared with :func:`id_field`. Its
    fields (or their aliases) are the prompt template's variables; keys of the data file
    that the model does not declare are ignored.
    """


def id_field(*args: Any, **kwargs: Any) -> Any:
    """A pydantic ``Field`` that marks the item identifier (instead of a field named ``id``)."""
    extra = dict(kwargs.pop("json_schema_extra", None) or {})
    extra[ID_MARKER] = True
    return Field(*args, json_schema_extra=extra, **kwargs)


@functools.cache
def id_field_name(model: type[BaseModel]) -> str:
    """Name of the identifier field of a DataModel; raises ValueError when there is none."""
    marked = [
        name
        for name, info in model.model_fields.items()
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get(ID_MARKER)
    ]
    if len(marked) > 1:
        raise ValueError(f"{model.__name__} marks several id fields: {marked}")
    if marked:
        return marked[0]
    if "id" in model.model_fields:
        return "id"
    raise ValueError(f"{model.__name__} has no field 'id' and no field marked with id_field()")


def item_id(item: BaseModel) -> str:
    """The item's identifier as text (the name of its id field is looked up once per model)."""
    return str(getattr(item, id_field_name(type(item))))
