"""Dotted paths of earlier releases into ape.tasks keep working, with one line saying where they live now."""

from __future__ import annotations

import importlib
import logging
import shutil
import sys
import warnings

import pytest

from ape.tasks.common.moved import MOVED, moved_path
from ape.tasks.plugins.loader import load_object
from tests.helpers.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each old path warns once per process; each test starts as a fresh process would."""
    from ape.tasks.common import moved
    from ape.tasks.plugins import registry

    monkeypatch.setattr(moved, "_warned", set())
    monkeypatch.setattr(registry, "_warned", set())


def _deprecations(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "deprecated" in r.getMessage()]


@pytest.mark.parametrize("old", sorted(set(MOVED) - {"models", "report"}))  # those two are packages now
def test_every_old_module_imports_as_its_new_home(old):
    new = importlib.import_module(f"ape.tasks.{MOVED[old]}")
    sys.modules.pop(f"ape.tasks.{old}", None)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        module = importlib.import_module(f"ape.tasks.{old}")
    assert module is new


def test_an_old_import_warns_once(caplog):
    sys.modules.pop("ape.tasks.mock_models", None)
    with pytest.warns(DeprecationWarning, match="now 'ape.tasks.models.mocks'"):
        from ape.tasks.mock_models import MockChatModel  # type: ignore[import-not-found]  # noqa: F401


def test_an_old_config_path_names_the_short_name(caplog):
    from ape.tasks.checking.metrics import f1

    caplog.set_level(logging.WARNING, logger="ape")
    assert load_object("ape.tasks.metrics:f1") is f1
    assert load_object("ape.tasks.metrics:f1") is f1
    assert _deprecations(caplog) == ["'ape.tasks.metrics:f1' is deprecated; write 'f1' instead"]


def test_attributes_of_a_module_that_became_a_package(caplog):
    from ape.tasks.models.build import build_model
    from ape.tasks.report.build import build_report

    caplog.set_level(logging.WARNING, logger="ape")
    assert load_object("ape.tasks.models:build_model") is build_model
    assert _deprecations(caplog) == [
        "'ape.tasks.models:build_model' is deprecated; write 'ape.tasks.models.build:build_model' instead"
    ]
    with pytest.warns(DeprecationWarning):
        assert importlib.import_module("ape.tasks.report").build_report is build_report
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        importlib.import_module("ape.tasks.models").nothing  # noqa: B018


def test_moved_path_leaves_current_and_foreign_paths_alone():
    assert moved_path("ape.tasks.score:builtin_checker") == "ape.tasks.checking.builtin:builtin_checker"
    assert moved_path("ape.tasks.models.mocks:MockChatModel") == "ape.tasks.models.mocks:MockChatModel"
    assert moved_path("mypkg.tasks.score:x") == "mypkg.tasks.score:x"


def test_a_config_with_old_dotted_paths_still_runs_validation(tmp_path, capsys):
    from ape.cli import main

    folder = tmp_path / "arithmetic"
    shutil.copytree(REPO_ROOT / "examples" / "arithmetic", folder, ignore=shutil.ignore_patterns("output"))
    config = folder / "config.toml"
    text = config.read_text()
    assert 'implementation = "last_number"' in text
    text = text.replace('implementation = "last_number"', 'implementation = "ape.tasks.adapt:LastNumberAdapter"')
    config.write_text(text)
    assert main(["validate", str(config)]) == 0
    assert "ok:" in capsys.readouterr().out
