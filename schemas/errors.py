"""The one error type users see: it says where (file, key or line) and what to do."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """Return a 'did you mean ...?' hint for a near-miss name, or None."""
    matches = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None
