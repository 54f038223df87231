"""Counts in plain English for the lines people read ("1 model", "2 models")."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and the noun, singular for exactly one: a summary line that says "1 models" reads
    as a bug to the person it is written for."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
