"""Counts and sizes in plain English for the lines people read ("1 model", "2 models", "1.2 GB")."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one: a summary line that says "1 models" reads
    as a bug to the person it is written for."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def human_size(size: float) -> str:
    """``1.2 GB``: bytes in the decimal units disk tools print (``df -H``, file managers)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(size) < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"
