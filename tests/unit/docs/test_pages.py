"""The docs pages against the code: the quick start's benchmark passes ``ape validate`` and
its documented error line is the one APE prints; every generated table renders; every
config key, built-in checker and adapter, and mock model argument is explained on its page."""

from __future__ import annotations

import re
import sys
import typing

import pytest
from pydantic import BaseModel

from ape import cli
from ape.schemas.config import ApeConfig
from tests.helpers.doc_blocks import DOCS, blocks

sys.path.insert(0, str(DOCS))
import hooks  # noqa: E402  (docs/hooks.py, the mkdocs hook that renders the generated tables)

INTERNAL = {"base_dir", "config_file"}  # set by the loader, not written in a config file
# where each section is explained; a section without an entry needs docs/config/<section>.md
PAGES = {"cli": "cli-hooks.md", "hooks": "cli-hooks.md", "(top level)": "index.md"}


def _quickstart() -> dict[str, str]:
    found = {b.language: b.text for b in blocks(DOCS / "quickstart.md") if b.language in ("json", "python", "toml")}
    found["error"] = next(b.text for b in blocks(DOCS / "quickstart.md") if b.text.startswith("error:"))
    return found


def test_the_quick_start_benchmark_validates_and_its_error_line_is_what_ape_prints(tmp_path, monkeypatch, capsys):
    page = _quickstart()
    (tmp_path / "data.jsonl").write_text(page["json"], encoding="utf-8")
    (tmp_path / "units.py").write_text(page["python"], encoding="utf-8")
    (tmp_path / "config.toml").write_text(page["toml"], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", "config.toml"]) == 0, capsys.readouterr().err
    assert "canary: 1 known answer graded as expected" in capsys.readouterr().out
    typo = page["toml"].replace('implementation = "units:close_enough"', 'implmentation = "units:close_enough"')
    (tmp_path / "config.toml").write_text(typo, encoding="utf-8")
    assert cli.main(["validate", "config.toml"]) == 2
    assert capsys.readouterr().err.strip() == page["error"].strip()


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_generated_table_renders(page):
    text = page.read_text(encoding="utf-8")
    rendered = hooks.render(text)
    assert not hooks.MARKER.search(rendered)
    if hooks.MARKER.search(text):
        assert "| key | type |" in rendered or "| argument |" in rendered


def test_the_config_reference_lists_every_section():
    rendered = hooks.render((DOCS / "config" / "reference.md").read_text(encoding="utf-8"))
    for header in (
        "[data]",
        "[[model]]",
        "[tools.NAME]",
        "[[checker.canary]]",
        "[checker.judge]",
        "[run]",
        "[monitor]",
    ):
        assert f"`{header}`" in rendered, header
    assert "| `solver_workers` | integer | `4` | ≥ 1; ≤ 1,024 |" in rendered
    assert "| `name` | string | the config file's name without `.toml` |" in rendered


def _section_model(annotation: object) -> type[BaseModel] | None:
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
def test_every_config_key_is_explained_on_its_page(section, key):
    page = DOCS / "config" / PAGES.get(section, f"{section}.md")
    assert page.is_file(), f"[{section}] has no page: write {page.relative_to(DOCS.parent)}"
    text = page.read_text(encoding="utf-8")
    # as `key = ...` in a TOML example (commented out or not), or named in backticks
    shown = re.search(rf"(^|[\s#]){re.escape(key)} = ", text, re.MULTILINE) or f"`{key}`" in text
    assert shown, f"[{section}] {key} is not explained in {page.relative_to(DOCS.parent)}"


def test_the_key_list_covers_nested_sections():
    keys = _keys()
    assert ("run", "window") in keys and ("model", "provider") in keys and ("tools", "factory") in keys


@pytest.mark.parametrize("kind", ["adapter", "checker"])
def test_every_builtin_adapter_and_checker_has_its_section(kind):
    from ape.tasks.plugins.registry import names

    text = (DOCS / "builtins.md").read_text(encoding="utf-8")
    missing = [name for name in names(kind) if f"### `{name}`" not in text]
    assert not missing, f"docs/builtins.md has no section for the built-in {kind}(s) {missing}"


def test_every_mock_model_argument_is_in_the_models_table():
    from langchain_core.language_models import BaseChatModel

    from ape.tasks.models.mocks.chat import MockChatModel

    text = (DOCS / "models.md").read_text(encoding="utf-8")
    own = [name for name in MockChatModel.model_fields if name not in BaseChatModel.model_fields]
    missing = [name for name in own if f"| `{name}` |" not in text]
    assert own and not missing, f"docs/models.md's mock table lacks {missing}"


def test_every_mock_behaviour_is_documented_in_the_models_page():
    from typing import get_args

    from ape.tasks.models.mocks.chat import Behaviour

    text = (DOCS / "models.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `behaviour` |"))
    assert not [b for b in get_args(Behaviour) if f"`{b}`" not in row]


def test_the_choices_page_lists_every_argument_of_the_log_likelihood_mock():
    from ape.tasks.models.mocks.scorer import MockScorer

    text = (DOCS / "config" / "choices.md").read_text(encoding="utf-8")
    missing = [name for name in MockScorer.model_fields if name != "name" and f"| `{name}` |" not in text]
    assert not missing, f"docs/config/choices.md's mock table lacks {missing}"


def test_the_front_page_and_the_quick_start_say_multiple_choice():
    for page in ("index.md", "quickstart.md"):
        text = (DOCS / page).read_text(encoding="utf-8").lower()
        assert "multiple choice" in text and "config/choices.md" in text, page


def test_every_page_is_in_the_navigation():
    nav = (DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")]
    assert [p for p in pages if f": {p}" not in nav] == []
