"""An agent session is cached with its grade, so what shapes its tools' replies and its
grade is in the session's cache key (``ModelSetup.fingerprint_key``), and what does not is
left out, so a copied config folder keeps its cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ape.config import load_config
from ape.tasks.setup.model import make_setup
from tests.helpers.paths import REPO_ROOT

CONFIG = REPO_ROOT / "examples" / "agent" / "config.toml"


def key_with(section: str, **values: Any) -> str:
    config = load_config(CONFIG)
    part = getattr(config, section)
    config = config.model_copy(update={section: part.model_copy(update=values)})
    return make_setup(config, config.model[0]).fingerprint_key


@pytest.mark.parametrize(
    ("section", "values"),
    [
        ("sandbox", {"memory_bytes": 64 * 2**20}),
        ("sandbox", {"session_timeout_s": 30.0}),
        ("sandbox", {"disk_bytes": 2**20}),
        ("sandbox", {"allow_hosts": ["pypi.org:443"]}),
        ("checker", {"args": {"test_command": "true"}}),
    ],
)
def test_what_shapes_the_session_or_its_grade_is_a_new_key(section: str, values: Any) -> None:
    assert key_with(section, **values) != key_with(section)


@pytest.mark.parametrize("values", [{"keep": True}, {"root": Path("/tmp")}])
def test_where_folders_are_made_keeps_the_key(values: Any) -> None:
    assert key_with("sandbox", **values) == key_with("sandbox")
