"""A number read from an environment variable, or one clear error naming the variable.

Why one place: several settings of the server APE starts come from the environment
(``APE_SERVER_RETENTION_DAYS``, ``APE_SERVER_START_TIMEOUT``); each must read "unset" as its
default and anything that is not an allowed number as one error that names the variable,
the value and what to give instead, rather than a traceback or a silent default.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from ape.schemas.errors import ApeError


def env_number(name: str, default: float, allowed: Callable[[float], bool], *, expected: str, hint: str) -> float:
    """``$name`` as a float: ``default`` when unset or blank, else the value if ``allowed``
    accepts it; otherwise an :class:`ApeError` "``name='value'`` is not ``expected``" with
    ``hint``. NaN and the infinities are never allowed."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not allowed(value):
        raise ApeError(f"{name}={text!r} is not {expected}", where=name, hint=hint)
    return value
