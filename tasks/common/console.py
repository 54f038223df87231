"""What the terminal shows of lines that repeat: the first of a kind, the rest counted.

A dead endpoint fails every session the same way; printing each failure (and each retry
before it) buried the one line that mattered under hundreds of copies. Lines are grouped
by their owner (a model id) and their text (a dead endpoint gives the same text on every
session; errors that differ in anything, an HTTP status say, stay apart): the first of
each group goes to the terminal, later ones only to run.log and the Prefect UI (a record
with :data:`CONSOLE_SKIP` set), and the count is told once when the owner is done
(:meth:`Repeats.take`).
"""

from __future__ import annotations

import threading

# A log record with this attribute set goes to run.log and the UI but not to the terminal
# (the command line's handler filters it out).
CONSOLE_SKIP = "ape_console_skip"


def signature(text: str, limit: int = 500) -> str:
    """``text`` on one line, its runs of white space as one space."""
    return " ".join(str(text).split())[:limit]


class Repeats:
    """Thread-safe counts of lines by (owner, signature), for one run; each kind keeps the
    text of its first line to tell the count with."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, list]] = {}

    def count(self, owner: str, text: str) -> int:
        """Count one more line ``text`` of ``owner``; returns how many lines of its kind
        (:func:`signature`) there have been, this one included (1: the first)."""
        with self._lock:
            kinds = self._counts.setdefault(owner, {})
            entry = kinds.setdefault(signature(text), [0, text])
            entry[0] += 1
            return int(entry[0])

    def take(self, owner: str) -> list[tuple[int, str]]:
        """The owner's kinds of lines as (count, first line), most frequent first; forgotten here."""
        with self._lock:
            kinds = self._counts.pop(owner, {})
        return sorted(((int(n), str(text)) for n, text in kinds.values()), key=lambda pair: -pair[0])

    def reset(self) -> None:
        """A new run begins."""
        with self._lock:
            self._counts.clear()
