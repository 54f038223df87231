"""Import user code named by a dotted path ``pkg.module:attr`` (or ``pkg.module.attr``).

Config validation and the runtime both resolve plugins through here, so a bad
path gives the same clear error at ``ape validate`` time as it would mid-run.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schemas.errors import ApeError, did_you_mean


def split_dotted(path: str) -> tuple[str, str]:
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ApeError(f"'{path}' is not a dotted path; expected 'package.module:attribute'")
    return module, attr


def ensure_on_path(folder: Path | None) -> None:
    """Let plugins that live beside the config file import without installing them."""
    if folder is not None:
        text = str(folder)
        if text not in sys.path:
            sys.path.insert(0, text)


def load_object(path: str, *, where: str | None = None, base_dir: Path | None = None) -> Any:
    """Import ``path`` and return the attribute, or raise ApeError naming ``where``."""
    ensure_on_path(base_dir)
    try:
        module_name, attr = split_dotted(path)
    except ApeError as exc:
        raise ApeError(exc.message, where=where) from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        parent = missing.rpartition(".")[0]
        hint = None
        if parent:
            try:
                pkg = importlib.import_module(parent)
                names = [p.stem for p in Path(next(iter(pkg.__path__))).glob("*.py")]
                hint = did_you_mean(missing.rpartition(".")[2], names)
            except Exception:
                hint = None
        raise ApeError(
            f"cannot import module '{module_name}' of '{path}': no module named '{missing}'",
            where=where,
            hint=hint or "is the package installed, or the module beside the config file?",
        ) from None
    except Exception as exc:  # the user's module itself failed while importing
        raise ApeError(
            f"importing '{module_name}' of '{path}' failed: {type(exc).__name__}: {exc}", where=where
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        public = [n for n in dir(module) if not n.startswith("_")]
        raise ApeError(
            f"module '{module_name}' has no attribute '{attr}'",
            where=where,
            hint=did_you_mean(attr, public),
        ) from None


def describe_exception(exc: BaseException) -> str:
    """One line for a failure in user code; pydantic errors as 'field: problem; ...'."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}"
                         for err in exc.errors())
    return f"{type(exc).__name__}: {exc}"


def call_plugin(target: Any, args: dict[str, Any], *, label: str, where: str | None) -> Any:
    """Call a user class or factory with its config ``args``; a failure is an ApeError that
    names the plugin, the args and what went wrong."""
    try:
        return target(**args)
    except Exception as exc:
        raise ApeError(f"calling {label} with args {args} failed: {describe_exception(exc)}",
                       where=where) from exc
