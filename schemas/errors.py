"""The one error type users see: it says where (file, key or line) and what to do."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails


class ApeError(Exception):
    """A user-facing error: printed as one line by the command line.

    ``where`` names the file (and line or TOML key) the problem is in, so the
    message always points at the thing to fix.
    """

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


def shown_path(path: str | os.PathLike[str]) -> str:
    """How an error line names a file (the config, the data file): relative to the current
    folder when the file is under it, else absolute. One rule whichever way the path reached
    the error (as typed, or resolved by the config loader), so two errors about one file
    read alike; computed when the error is made, in the folder the command runs in."""
    try:
        here = Path.cwd()
    except OSError:  # the current folder was removed
        return str(path)
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(here))
    except ValueError:
        return str(absolute)


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """Return a 'did you mean ...?' hint for a near-miss name, or None."""
    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


def problem_key(error: ErrorDetails, default: str = "") -> str:
    """The dotted location of one validation problem (``args.timeout_s``); ``default`` when
    the problem is with the value as a whole."""
    return ".".join(str(part) for part in error["loc"]) or default


def problem_message(error: ErrorDetails) -> str:
    """pydantic's message for one problem, without the "Value error, " it puts before the
    text of a validator's ValueError (that text is written for users already)."""
    return str(error["msg"]).removeprefix("Value error, ")


def first_problem(exc: ValidationError, default: str = "") -> str:
    """The first problem of ``exc`` as ``key: message`` (the message alone when the problem is
    with the value as a whole): for a message that tells only the first."""
    first = exc.errors()[0]
    key = problem_key(first, default)
    return f"{key}: {problem_message(first)}" if key else problem_message(first)


def more_problems(count: int) -> str:
    """ "1 more problem", "3 more problems": for a message that tells only the first."""
    return f"{count} more problem{'s' if count > 1 else ''}"


def validation_lines(
    exc: ValidationError, *, fields: Iterable[str] = (), default: str = "", quote: bool = True
) -> list[str]:
    """One line per problem of ``exc``: ``'key': message`` (``key: message`` without
    ``quote``), an unknown key followed by a did-you-mean among ``fields`` when one is close."""
    known = list(fields)
    lines = []
    for error in exc.errors():
        key = problem_key(error, default)
        hint = did_you_mean(key, known) if known and error["type"] == "extra_forbidden" else None
        shown = f"'{key}'" if quote else key
        lines.append(f"{shown}: {problem_message(error)}" + (f" ({hint})" if hint else ""))
    return lines


def validation_error(
    exc: ValidationError,
    what: str,
    *,
    where: str | None = None,
    hint: str | None = None,
    fields: Iterable[str] = (),
    default: str = "",
    quote: bool = True,
) -> ApeError:
    """The ApeError for a failed validation: ``what`` and every problem of ``exc`` on one line
    (``what: 'key': message; 'other': message``), see :func:`validation_lines`."""
    lines = validation_lines(exc, fields=fields, default=default, quote=quote)
    return ApeError(f"{what}: {'; '.join(lines)}", where=where, hint=hint)
