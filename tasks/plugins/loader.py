"""Import user code named in a config: a built-in name, or a dotted path ``pkg.module:attr``.

Config validation and the runtime both resolve plugins through here, so a bad
path gives the same clear error at ``ape validate`` time as it would mid-run.

Plugins beside the config are loaded by path, never by editing ``sys.path``: when the
first part of a dotted path is a module or package in the config's folder
(``arithmetic:Problem`` with ``arithmetic.py`` beside ``config.toml``), it is imported
as a submodule of a private package named after that folder's path
(``_ape_plugins_<hash>.arithmetic``). The name is deterministic, so a Dask worker that
loads the same config gets the same module, and two configs in one process whose plugin
modules share a name (``tasks.py`` beside each) each get their own. Everything else is
imported normally, so an installed package (or APE itself) is never shadowed by a file
that happens to sit beside a config. Plugin modules import their siblings relatively
(``from . import helpers``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ape.schemas.errors import ApeError, did_you_mean, validation_lines
from ape.schemas.results import ErrorInfo
from ape.tasks.plugins.registry import Kind, is_short_name, resolve

PRIVATE_PREFIX = "_ape_plugins_"
_lock = threading.RLock()


def split_dotted(path: str) -> tuple[str, str]:
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ApeError(f"'{path}' is not a dotted path; expected 'package.module:attribute'")
    return module, attr


def private_package(folder: Path) -> str:
    """The private package name under which the plugins of ``folder`` are imported."""
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    return f"{PRIVATE_PREFIX}{digest}"


def beside(module_name: str, folder: Path | None) -> bool:
    """Whether the top package of ``module_name`` is a module or package in ``folder``
    (APE's own ``ape`` never is: a source checkout holds an ``ape/`` folder)."""
    if folder is None:
        return False
    top = module_name.split(".")[0]
    if top == "ape":
        return False
    return (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file()


def _ensure_private_package(folder: Path) -> str:
    name = private_package(folder)
    with _lock:
        if name not in sys.modules:
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(folder.resolve())]
            package = importlib.util.module_from_spec(spec)
            package.__doc__ = f"APE plugins loaded from {folder.resolve()}"
            sys.modules[name] = package
    return name


def import_plugin_module(module_name: str, base_dir: Path | None) -> types.ModuleType:
    """Import ``module_name``: from ``base_dir`` under its private name when it lives there,
    otherwise as an ordinary import."""
    if beside(module_name, base_dir):
        assert base_dir is not None
        package = _ensure_private_package(base_dir)
        with _lock:
            return importlib.import_module(f"{package}.{module_name}")
    return importlib.import_module(module_name)


def load_object(path: str, *, kind: Kind | None = None, where: str | None = None, base_dir: Path | None = None) -> Any:
    """The object a config names, or an ApeError naming ``where``.

    ``path`` is a built-in name of ``kind`` (see :mod:`ape.tasks.plugins.registry`), a dotted
    path to a module beside the config (``base_dir``), or any importable dotted path.
    """
    if kind is not None and is_short_name(path):
        path = resolve(kind, path, where=where)
    try:
        module_name, attr = split_dotted(path)
    except ApeError as exc:
        raise ApeError(exc.message, where=where) from None
    module = _import(module_name, path, where, base_dir)
    try:
        return getattr(module, attr)
    except AttributeError:
        public = [n for n in dir(module) if not n.startswith("_")]
        raise ApeError(
            f"module '{module_name}' has no attribute '{attr}'",
            where=where,
            hint=did_you_mean(attr, public),
        ) from None


def _import(module_name: str, path: str, where: str | None, base_dir: Path | None) -> types.ModuleType:
    try:
        return import_plugin_module(module_name, base_dir)
    except ModuleNotFoundError as exc:
        missing = (exc.name or module_name).removeprefix(private_package(base_dir) + "." if base_dir else "")
        if missing != module_name and not module_name.startswith(missing):
            # the plugin module itself was found; something it imports was not
            raise ApeError(
                f"importing '{module_name}' of '{path}' failed: no module named '{missing}'",
                where=where,
                hint=_sibling_hint(missing, base_dir) or f"pip install the package that provides '{missing}'",
            ) from None
        raise ApeError(
            f"cannot import module '{module_name}' of '{path}': no module named '{missing}'",
            where=where,
            hint=_module_hint(missing, base_dir) or "is the package installed, or the module beside the config file?",
        ) from None
    except ApeError:
        raise
    except BaseException as exc:  # the user's module itself failed (or exited) while importing
        if isinstance(exc, KeyboardInterrupt):
            raise
        what = f"exited with status {exc.code}" if isinstance(exc, SystemExit) else f"raised {describe_exception(exc)}"
        raise ApeError(f"importing '{module_name}' of '{path}' {what}", where=where) from exc


def _sibling_hint(missing: str, base_dir: Path | None) -> str | None:
    if base_dir is not None and beside(missing, base_dir):
        return (
            f"'{missing}' is beside the config: plugin modules are loaded by path, so "
            f"import it relatively ('from . import {missing.split('.')[0]}')"
        )
    return None


def _module_hint(missing: str, base_dir: Path | None) -> str | None:
    parent, _, leaf = missing.rpartition(".")
    candidates: list[str] = []
    if parent:
        try:
            package = import_plugin_module(parent, base_dir)
            for folder in getattr(package, "__path__", []):
                candidates += [p.stem for p in Path(folder).glob("*.py")]
        except Exception:
            candidates = []
    elif base_dir is not None:
        candidates = [p.stem for p in base_dir.glob("*.py")] + [
            p.name for p in base_dir.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
        ]
    return did_you_mean(leaf, candidates)


def describe_exception(exc: BaseException) -> str:
    """One line for a failure in user code; pydantic errors as 'field: problem; ...'.

    Any other exception ends with the innermost frame of the user's own code
    (``KeyError: 'x' (at units.py:14 in __init__)``), so the line points at what to fix."""
    if isinstance(exc, ValidationError):
        return "; ".join(validation_lines(exc, default="value", quote=False))
    return ErrorInfo.from_exception(exc).line()


def call_plugin(target: Any, args: dict[str, Any], *, label: str, where: str | None) -> Any:
    """Call a user class or factory with its config ``args``; a failure is an ApeError that
    names the plugin, the args and what went wrong."""
    try:
        return target(**args)
    except Exception as exc:
        raise ApeError(f"calling {label} with args {args} failed: {describe_exception(exc)}", where=where) from exc
