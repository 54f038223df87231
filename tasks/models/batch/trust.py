"""Which of an output folder's batch records a batcher may take as its own.

A resumed batcher reads two files back (:mod:`ape.tasks.models.batch.batcher`): the ledger
``batches.jsonl`` and the answers ``batch_results.jsonl``. An answer taken from them is
saved as the model's, so a planted or copied file must not be believed on its word:

- an answer row is used only when its batch is on a ``submitted`` line of the same
  folder's ledger, its ``custom_id`` is one of that line's, and it carries the
  ``request_hash`` the line records for it (the hash of the request body submitted). A row
  or line without hashes (written before APE recorded them) is not used: its request is
  asked again once.
  When a session asks, the row's hash must also equal the hash of the body it would send
  (:meth:`~ape.tasks.models.batch.batcher.Batcher.ask`);
- a ``submitted`` batch that has not ended is collected only once the provider's own
  description of it (:meth:`~ape.tasks.models.batch.clients.BatchClient.describe`) shows this
  folder's requests: its metadata tag (OpenAI), its number of requests, and its
  ``custom_id`` set, with each request body's hash, as the line records it, where the
  provider shows the body (OpenAI's input file). Anthropic shows a batch's requests only
  once it ended, and never their bodies, so there the ``custom_id`` set is checked when the
  results arrive (a ``custom_id`` is itself a hash of the session and the request body).

Anything else is refused: one warning line, counted on the model's batch board (the run's
summary, ``refused_batch_records``), and the request is submitted again.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProviderBatch", "TrustedAnswers", "batch_refusal", "request_hash", "trusted_answers"]


def request_hash(body: dict[str, Any]) -> str:
    """The SHA-256 of a request body as JSON with sorted keys: the same body, the same hash,
    whichever process wrote it or read it back from the provider."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ProviderBatch:
    """What a provider shows of one of its batches.

    ``tag``: the metadata tag it carries, when ``tags_shown`` (OpenAI; Anthropic takes none);
    ``total``: its number of requests, when shown; ``requests``: ``custom_id`` -> hash of the
    request body (None where the body is not shown), or None when the provider does not show
    the batch's requests yet."""

    tags_shown: bool
    tag: str | None = None
    total: int | None = None
    requests: dict[str, str | None] | None = None


@dataclass(frozen=True)
class TrustedAnswers:
    """The answer rows a batcher may use (``custom_id`` -> (request hash, body)) and how many
    rows it may not, by reason."""

    answers: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    refused: Counter[str] = field(default_factory=Counter)


def _hashes(line: dict[str, Any]) -> dict[str, str]:
    """The request hashes a ledger line records (``requests``: custom_id -> hash), if any."""
    found = line.get("requests")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def trusted_answers(rows: list[dict[str, Any]], submitted: dict[str, dict[str, Any]]) -> TrustedAnswers:
    """The rows of ``batch_results.jsonl`` whose batch is one of ``submitted`` (batch id ->
    its ``submitted`` ledger line) and which carry the hash of a request that line holds."""
    trusted = TrustedAnswers()
    for row in rows:
        cid, body, digest = str(row.get("custom_id")), row.get("body"), row.get("request_hash")
        line = submitted.get(str(row.get("batch_id")))
        if not isinstance(body, dict):
            trusted.refused["no answer body"] += 1
        elif line is None:
            trusted.refused["its batch is on no submitted line of batches.jsonl"] += 1
        elif cid not in {str(c) for c in line.get("custom_ids") or []}:
            trusted.refused["its request is not one its batch was submitted with"] += 1
        elif not isinstance(digest, str) or cid not in _hashes(line):
            trusted.refused["no request hash"] += 1
        elif _hashes(line)[cid] != digest:
            trusted.refused["its request hash is not the submitted request's"] += 1
        else:
            trusted.answers[cid] = (digest, body)
    return trusted


def batch_refusal(line: dict[str, Any], record: ProviderBatch) -> str | None:
    """Why the provider's ``record`` of a batch does not show the requests of its ledger
    ``line`` (None when it does, or shows too little to tell yet)."""
    ids = {str(c) for c in line.get("custom_ids") or []}
    expected = _hashes(line)
    if not ids or set(expected) != ids:
        return "its ledger line does not record the hash of each request (not written by this APE)"
    if record.tags_shown and record.tag != line.get("tag"):
        return f"the provider's batch carries tag {record.tag!r}, not this folder's {line.get('tag')!r}"
    if record.total is not None and record.total != len(ids):
        return f"the provider's batch holds {record.total} requests, not the {len(ids)} this folder submitted"
    if record.requests is None:
        return None
    if set(record.requests) != ids:
        foreign = len(set(record.requests) - ids)
        return f"the provider's batch holds {foreign} request(s) this folder did not submit, or lacks some of its own"
    changed = [cid for cid, digest in record.requests.items() if digest is not None and expected[cid] != digest]
    if changed:
        return f"{len(changed)} request body(ies) at the provider differ from the ones this folder submitted"
    return None
