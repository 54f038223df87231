"""Every shipped example writes its outputs beside its config (a copied example keeps its own)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*/config.toml"))


def test_there_are_examples() -> None:
    assert {p.parent.name for p in EXAMPLES} >= {"arithmetic", "demo", "humaneval", "llm"}


@pytest.mark.parametrize("config", EXAMPLES, ids=lambda p: p.parent.name)
def test_outputs_land_inside_the_examples_folder(config: Path) -> None:
    output = tomllib.loads(config.read_text(encoding="utf-8")).get("run", {}).get("output", "output")
    resolved = (config.parent / output).resolve()
    assert resolved.is_relative_to(config.parent.resolve()), f"{config}: [run] output = {output!r} leaves its folder"
