"""What a session records of its rendered prompt: a short hash, enough to tell two prompts
apart (the run's health report flags items whose prompt rendered empty, or many items
sharing one prompt) without storing the prompt a second time. Its own module so the run
path does not import the report's pandas to compute it."""

from __future__ import annotations

import hashlib

PROMPT_HASH_CHARS = 16
EMPTY_PROMPT_HASH = hashlib.sha256(b"").hexdigest()[:PROMPT_HASH_CHARS]


def prompt_hash(prompt: str, system: str | None = None) -> str:
    """The ``prompt_hash`` of a rendered prompt and its system message; an empty prompt's is
    :data:`EMPTY_PROMPT_HASH`."""
    text = f"{system}\x00{prompt}" if system else prompt
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:PROMPT_HASH_CHARS]
