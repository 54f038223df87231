"""APE: an LLM benchmark runner on Prefect.

The public API. Everything a user's benchmark code or script needs is importable from
here; the subpackages (``ape.flows``, ``ape.tasks``, ``ape.schemas``) are internal and may
change. Names are loaded on first use, so ``from ape import Passed`` in a checker module
does not import Prefect.

Running:
    run(config) -> Envelope          run a benchmark from a config file or ApeConfig
    load_config(path) -> ApeConfig   read and validate a config.toml
    run_eval(adapters, tasks)        the eval demo's runner: ModelAdapters over task specs
    build_report(dirs, out)          rebuild the report from saved results

Writing plugins:
    DataModel, id_field, Passed, Failed, Checker, ModelAdapter, Generation, ToolProvider, TaskSpec

Errors:
    ApeError                          bad input: names the file, the key and what to do
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("ape-bench")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "run": "ape.api",
    "load_config": "ape.config",
    "ApeConfig": "ape.schemas.config",
    "ModelAdapter": "ape.schemas.models",
    "ToolProvider": "ape.schemas.models",
    "Generation": "ape.schemas.results",
    "Checker": "ape.schemas.check",
    "Passed": "ape.schemas.check",
    "Failed": "ape.schemas.check",
    "TaskSpec": "ape.schemas.taskspec",
    "ApeError": "ape.schemas.errors",
    "Envelope": "ape.schemas.report",
    "run_eval": "ape.flows.demo",
    "build_report": "ape.tasks.report.build",
    "id_field": "ape.schemas.data",
    "DataModel": "ape.schemas.data",
}

__all__ = [
    "ApeConfig",
    "ApeError",
    "Checker",
    "DataModel",
    "Envelope",
    "Failed",
    "Generation",
    "ModelAdapter",
    "Passed",
    "TaskSpec",
    "ToolProvider",
    "__version__",
    "build_report",
    "id_field",
    "load_config",
    "run",
    "run_eval",
]

if TYPE_CHECKING:
    from ape.api import run
    from ape.config import load_config
    from ape.flows.demo import run_eval
    from ape.schemas.check import Checker, Failed, Passed
    from ape.schemas.config import ApeConfig
    from ape.schemas.data import DataModel, id_field
    from ape.schemas.errors import ApeError
    from ape.schemas.models import ModelAdapter, ToolProvider
    from ape.schemas.report import Envelope
    from ape.schemas.results import Generation
    from ape.schemas.taskspec import TaskSpec
    from ape.tasks.report.build import build_report


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ape' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
