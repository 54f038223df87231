"""Dotted paths of earlier releases into ``ape.tasks``: they keep working, with a one-line warning.

Until the modules of ``ape.tasks`` were grouped by job, ``ape.tasks.score``,
``ape.tasks.mock_models`` and their siblings sat side by side. A config or script that
still names such a path (``implementation = "ape.tasks.metrics:f1"``) imports the module's
new home under its old name, and the ``ape`` logger says once where it lives now. A
finder on ``sys.meta_path`` does this rather than a stub module per old name, so the
tree on disk holds only real modules.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

PACKAGE = "ape.tasks"

# old module name under ape.tasks -> its module now
MOVED: dict[str, str] = {
    "render": "solving.render",
    "solve": "solving.solve",
    "adapt": "solving.adapt",
    "tools": "solving.tools",
    "deadline": "common.deadline",
    "check": "checking.check",
    "grade": "checking.grade",
    "metrics": "checking.metrics",
    "score": "checking.builtin",
    "taskspec": "checking.taskspec",
    "code_exec": "checking.code.code_exec",
    "code_harness": "checking.code.harness",
    "sandbox": "checking.code.sandbox",
    "models": "models.build",
    "managed_model": "models.managed",
    "limits": "models.limits",
    "adapter_chat": "models.adapter_chat",
    "model_fingerprint": "models.fingerprint",
    "llama_server": "models.llama_server",
    "mock_models": "models.mocks",
    "model_adapters": "models.demo_adapters",
    "data": "storage.data",
    "save": "storage.save",
    "run_files": "storage.run_files",
    "outdir": "storage.outdir",
    "transcripts": "storage.transcripts",
    "runs": "storage.runs",
    "history": "storage.history",
    "aggregate": "stats.aggregate",
    "intervals": "stats.intervals",
    "calibrate": "stats.calibration",
    "power": "stats.power",
    "regression": "stats.regression",
    "cost": "stats.cost",
    "report": "report.build",
    "sessions_table": "report.sessions_table",
    "envelope": "report.envelope",
    "markdown": "report.markdown",
    "parquet_tables": "report.parquet_tables",
    "chart": "report.chart",
    "provenance": "report.provenance",
    "trend": "report.trend",
    "demo_verdicts": "report.demo_verdicts",
}

_warned: set[str] = set()


def _warn(old: str, new: str) -> None:
    if old in _warned:
        return
    _warned.add(old)
    message = f"'{old}' is deprecated; it is now '{new}'"
    logging.getLogger("ape").warning(message)
    warnings.warn(message, DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    """Loads an old module name as the module that replaced it (the same object)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds ``ape.tasks.<old>`` for the names in :data:`MOVED`; leaves every other name alone."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix = PACKAGE + "."
        if not fullname.startswith(prefix):
            return None
        new = MOVED.get(fullname[len(prefix) :])
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(fullname, f"{PACKAGE}.{new}"))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (after the normal finders: real modules win)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())


def moved_attribute(old: str, new: str, name: str) -> Any:
    """An attribute of the old module ``ape.tasks.<old>`` that is now a package: read from ``new``."""
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module(f"{PACKAGE}.{new}")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module '{PACKAGE}.{old}' has no attribute '{name}'") from None
    _warn(f"{PACKAGE}.{old}:{name}", f"{PACKAGE}.{new}:{name}")
    return value


def moved_path(dotted: str) -> str:
    """``module:attribute`` with an old module of ``ape.tasks`` replaced by its new home;
    any other path unchanged."""
    module, colon, attribute = dotted.partition(":")
    prefix = PACKAGE + "."
    new = MOVED.get(module[len(prefix) :]) if module.startswith(prefix) else None
    return f"{PACKAGE}.{new}{colon}{attribute}" if new else dotted
