"""Prompt rendering with langchain-core's mustache renderer.

Template variables are the DataModel's field names, or their aliases where a
field declares one. A variable the schema lacks is an error at validation time,
not a silently empty string.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from langchain_core.prompts.string import mustache_template_vars
from langchain_core.utils import mustache
from pydantic import BaseModel

from ape.schemas.errors import ApeError, did_you_mean


def template_variables(template: str) -> set[str]:
    """Top-level variable names used by a mustache template."""
    return set(mustache_template_vars(template))


def schema_variables(model: type[BaseModel]) -> set[str]:
    """The names a template may use: the fields (by alias) and the computed fields, which
    :func:`item_context` renders too (``model_dump`` holds them)."""
    computed = {info.alias or name for name, info in model.model_computed_fields.items()}
    return {info.alias or name for name, info in model.model_fields.items()} | computed


def check_template(template: str, model: type[BaseModel], *, where: str) -> None:
    """Raise ApeError when the template uses a variable the schema does not define."""
    try:
        used = template_variables(template)
    except Exception as exc:  # malformed mustache (unclosed section, ...)
        raise ApeError(f"invalid mustache template: {exc}", where=where) from None
    known = schema_variables(model)
    for name in sorted(used - known):
        raise ApeError(
            f"template variable '{{{{ {name} }}}}' is not a field of {model.__name__}",
            where=where,
            hint=did_you_mean(name, known) or f"fields: {', '.join(sorted(known))}",
        )


def item_context(item: BaseModel) -> dict[str, Any]:
    """The variables an item offers a template: aliases where declared."""
    return item.model_dump(mode="json", by_alias=True)


@lru_cache(maxsize=64)
def _unescaped(template: str) -> tuple[tuple[str, str], ...]:
    """Tokens of ``template`` with HTML escaping turned off.

    Mustache escapes ``{{ x }}`` for HTML by default; a prompt is not HTML, and
    code or math with ``<``/``&`` must reach the model verbatim.
    """
    return tuple(("no escape", key) if tag == "variable" else (tag, key) for tag, key in mustache.tokenize(template))


def render(template: str, item: BaseModel) -> str:
    return mustache.render(list(_unescaped(template)), item_context(item))


def render_context(template: str, context: dict[str, Any]) -> str:
    """``template`` rendered with any variables (a judge's rubric: item fields, solution, reference)."""
    return mustache.render(list(_unescaped(template)), context)
