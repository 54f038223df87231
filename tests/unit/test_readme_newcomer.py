"""What a newcomer needs from the README and the docs, and the product's words: the venv the
first command assumes, PREFECT_HOME, the source build of llama-cpp-python, the Generation
fields, and plain names instead of project history ("seed 3")."""

from __future__ import annotations

import re
from pathlib import Path

from ape.schemas.results import Generation

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md"))}
DOCS = "\n".join(PAGES.values())
HISTORY = re.compile(r"seed[- ]3|seeds' behaviou?r|the seed-\d", re.IGNORECASE)


def test_the_first_command_says_it_needs_a_virtual_environment() -> None:
    for text in (README, PAGES[ROOT / "docs" / "quickstart.md"]):
        before = text.split("```bash", 1)[0]
        assert "virtual environment" in before and "python3 -m venv .venv" in before


def test_the_readme_starts_with_the_two_commands_and_links_into_the_docs() -> None:
    first = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert first is not None
    # a user's install is the package alone; the test tools come with the second command
    assert "pip install -e . && python -m ape examples/arithmetic/config.toml" in first.group(1)
    assert "pip install -e '.[dev]' && python -m pytest -q" in first.group(1)
    linked = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert len(linked) >= 8 and all((ROOT / link).is_file() for link in linked), linked
    assert len(README.splitlines()) < 200, "the README is the front door; the reference lives in docs/"


def test_prefect_home_and_the_source_build_are_mentioned() -> None:
    assert "PREFECT_HOME" in DOCS
    assert re.search(r"llama-cpp-python wheel fits.*\n?.*from source", DOCS)


def test_every_generation_field_is_listed() -> None:
    plugins = PAGES[ROOT / "docs" / "plugins.md"]
    for name in Generation.model_fields:
        assert f"`{name}`" in plugins, name
    assert "`confidence` (required" in plugins


def test_no_project_history_in_the_readme_the_docs_or_the_product() -> None:
    folders = ["ape", "schemas", "tasks", "flows", "deployments", "examples", "tests", "docs"]
    files = [ROOT / "README.md"]
    for folder in folders:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".toml", ".md", ".yaml"}]
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in files
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if HISTORY.search(line)
    ]
    assert not found, f"write a plain name (the eval demo, task specs) instead: {found}"
