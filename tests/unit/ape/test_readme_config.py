"""Every key a config file accepts is shown in the README, so no option is undocumented."""

from __future__ import annotations

import re
import typing

import pytest
from pydantic import BaseModel

from ape.schemas.config import ApeConfig
from tests.helpers.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
INTERNAL = {"base_dir", "config_file"}  # set by the loader, not written in a config file


def _section_model(annotation: object) -> type[BaseModel] | None:
    """The pydantic model of a section, also inside list[...] and dict[str, ...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_model(arg)
        if found is not None:
            return found
    return None


def _keys() -> list[tuple[str, str]]:
    keys = []
    for section, field in ApeConfig.model_fields.items():
        if section in INTERNAL:
            continue
        model = _section_model(field.annotation)
        if model is None:
            keys.append(("(top level)", field.alias or section))
            continue
        keys += [(section, sub.alias or name) for name, sub in model.model_fields.items()]
    return keys


@pytest.mark.parametrize(("section", "key"), _keys(), ids=lambda v: v)
def test_every_config_key_is_shown_in_the_readme(section, key):
    # as `key = ...` in a TOML example (commented out or not), or named in backticks
    shown = re.search(rf"(^|[\s#]){re.escape(key)} = ", README, re.MULTILINE) or f"`{key}`" in README
    assert shown, f"[{section}] {key} is not documented in README.md"


def test_the_key_list_covers_nested_sections():
    keys = _keys()
    assert ("run", "window") in keys and ("model", "provider") in keys and ("tools", "factory") in keys
