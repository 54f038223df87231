"""The two batch APIs APE speaks: OpenAI-compatible ``/v1/files`` + ``/v1/batches``, and
Anthropic's ``/v1/messages/batches``.

Each client does five things and nothing else: :meth:`BatchClient.submit` sends a list
of requests (each with its ``custom_id`` and its request body) under a client-chosen tag
and returns the batch id; :meth:`BatchClient.poll` returns the batch's :class:`BatchState`;
:meth:`BatchClient.results` returns what each request came to, by ``custom_id``: the
provider's answer body, or the provider's error message; :meth:`BatchClient.find` looks
among the provider's batches for the one a submit with a given tag created (the submit of
a process killed before it could record the batch id); :meth:`BatchClient.describe` returns
what the provider shows of a batch (its tag, size and requests), so a batch named by the
ledger of a resumed run is checked to hold that folder's requests before it is collected
(:mod:`ape.tasks.models.batch.trust`). Gathering, the ledger and waiting are
:mod:`ape.tasks.models.batch.batcher`'s job.

Finding a batch by its tag:

- OpenAI: the tag goes in the batch's ``metadata`` (``{"ape_tag": tag}``), which
  ``GET /v1/batches`` lists; a match is certain.
- Anthropic's Message Batches take no batch-level metadata and do not show a batch's
  requests before it ends, so a batch is recognised by what the listing shows: created
  within :data:`FIND_WINDOW_S` of the submit's start (either side, for clock skew) with
  exactly the submit's number of requests, and not a batch the ledger already knows.
  One such batch is adopted; none or several (an ambiguity) find nothing, and the requests
  are submitted again as before. Its results are still matched by ``custom_id``.

The OpenAI client goes through the ``openai`` SDK (the one ``langchain-openai`` already
holds, with its key and ``base_url``); there is no Anthropic SDK among APE's
dependencies, so that client speaks HTTP with ``httpx`` (``x-api-key`` and
``anthropic-version`` headers, as the API asks).

What the providers say (and the stub in the tests imitates):

- OpenAI: a JSONL file of ``{"custom_id", "method": "POST", "url": "/v1/chat/completions",
  "body"}`` uploaded with ``purpose = "batch"``, then ``POST /v1/batches``; the batch's
  ``status`` goes ``validating -> in_progress -> finalizing -> completed`` (or ``failed``,
  ``expired``, ``cancelled``); ``output_file_id`` holds the answered requests,
  ``error_file_id`` the failed ones (an expired batch's unanswered requests arrive there
  with code ``batch_expired``).
- Anthropic: ``POST /v1/messages/batches`` with ``{"requests": [{"custom_id", "params"}]}``;
  ``processing_status`` goes ``in_progress -> ended``; the results (JSONL at
  ``results_url``) hold ``result.type`` ``succeeded`` (``message``), ``errored``
  (``error``), ``canceled`` or ``expired``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx

from ape.tasks.models.batch.trust import ProviderBatch, request_hash

__all__ = [
    "AnthropicBatchClient",
    "BatchClient",
    "BatchState",
    "OpenAIBatchClient",
    "RequestResult",
]

CHAT_ENDPOINT = "/v1/chat/completions"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com"
TAG_KEY = "ape_tag"  # the batch metadata key that holds the submit's tag (OpenAI)
FIND_WINDOW_S = 600.0  # how far from a submit's start a batch it created may be dated
FIND_PAGES = 10  # listing pages (100 batches each) looked through, newest first


@dataclass(frozen=True)
class BatchState:
    """Where a batch stands: the provider's status word, whether it has ended, its counts."""

    status: str
    ended: bool
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why the whole batch failed (a rejected input file, say)


@dataclass(frozen=True)
class RequestResult:
    """What one request came to: an answer ``body`` or an ``error`` message (``expired`` when
    the batch's window closed before it ran)."""

    body: dict[str, Any] | None = None
    error: str | None = None
    expired: bool = False


class BatchClient(Protocol):
    """One provider's batch API."""

    provider: str

    def submit(self, requests: list[tuple[str, dict[str, Any]]], tag: str) -> str: ...
    def poll(self, batch_id: str) -> BatchState: ...
    def results(self, batch_id: str) -> dict[str, RequestResult]: ...
    def find(self, tag: str, requests: int, since: float, known: Collection[str]) -> str | None: ...
    def describe(self, batch_id: str) -> ProviderBatch: ...


def _jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _epoch(text: Any) -> float | None:
    """An RFC 3339 time (Anthropic's ``created_at``) as epoch seconds; None when unreadable."""
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _error_text(error: Any) -> str:
    """The provider's message out of its error object (nested ``error.message`` or a string)."""
    while isinstance(error, dict):
        if isinstance(error.get("message"), str):
            kind = error.get("code") or error.get("type")
            return f"{kind}: {error['message']}" if kind else error["message"]
        error = error.get("error")
    return str(error) if error else "the provider gave no reason"


class OpenAIBatchClient:
    """OpenAI's Batch API (also vLLM's OpenAI server) through an ``openai.OpenAI`` client."""

    provider = "openai"

    def __init__(self, client: Any, completion_window: str = "24h"):
        self.client = client
        self.completion_window = completion_window

    def submit(self, requests: list[tuple[str, dict[str, Any]]], tag: str) -> str:
        lines = "".join(
            json.dumps({"custom_id": cid, "method": "POST", "url": CHAT_ENDPOINT, "body": body}) + "\n"
            for cid, body in requests
        )
        uploaded = self.client.files.create(file=("ape-batch.jsonl", lines.encode()), purpose="batch")
        batch = self.client.batches.create(
            input_file_id=uploaded.id,
            endpoint=CHAT_ENDPOINT,
            completion_window=self.completion_window,
            metadata={TAG_KEY: tag},
        )
        return str(batch.id)

    def find(self, tag: str, requests: int, since: float, known: Collection[str]) -> str | None:
        """The batch whose metadata carries ``tag``, looking back to ``since`` (epoch s)."""
        seen = 0
        for batch in self.client.batches.list(limit=100):
            if (batch.metadata or {}).get(TAG_KEY) == tag:
                return str(batch.id)
            seen += 1
            if batch.created_at < since - FIND_WINDOW_S or seen >= 100 * FIND_PAGES:
                break  # newest first: older ones cannot be it
        return None

    def describe(self, batch_id: str) -> ProviderBatch:
        """The batch's metadata tag, size, and each request's body hash from its input file."""
        batch = self.client.batches.retrieve(batch_id)
        requests: dict[str, str | None] = {}
        for row in _jsonl(self.client.files.content(batch.input_file_id).text):
            body = row.get("body")
            requests[str(row.get("custom_id"))] = request_hash(body) if isinstance(body, dict) else "(no body)"
        counts = batch.request_counts
        return ProviderBatch(
            tags_shown=True,
            tag=(batch.metadata or {}).get(TAG_KEY),
            total=counts.total if counts and counts.total else None,
            requests=requests,
        )

    def poll(self, batch_id: str) -> BatchState:
        batch = self.client.batches.retrieve(batch_id)
        counts = batch.request_counts
        numbers = {"total": counts.total, "completed": counts.completed, "failed": counts.failed} if counts else {}
        error = None
        if batch.status == "failed" and getattr(batch, "errors", None) and batch.errors.data:
            error = "; ".join(str(e.message) for e in batch.errors.data)
        return BatchState(
            status=str(batch.status),
            ended=batch.status in {"completed", "failed", "expired", "cancelled"},
            counts=numbers,
            error=error,
        )

    def results(self, batch_id: str) -> dict[str, RequestResult]:
        batch = self.client.batches.retrieve(batch_id)
        found: dict[str, RequestResult] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            for row in _jsonl(self.client.files.content(file_id).text):
                found[str(row["custom_id"])] = self._one(row)
        return found

    @staticmethod
    def _one(row: dict[str, Any]) -> RequestResult:
        response = row.get("response") or {}
        error = row.get("error")
        if error:
            expired = isinstance(error, dict) and error.get("code") == "batch_expired"
            return RequestResult(error=_error_text(error), expired=expired)
        status = int(response.get("status_code") or 0)
        body = response.get("body")
        if status >= 400 or not isinstance(body, dict):
            return RequestResult(error=f"HTTP {status}: {_error_text(body)}")
        return RequestResult(body=body)


class AnthropicBatchClient:
    """Anthropic's Message Batches API over ``httpx``."""

    provider = "anthropic"

    def __init__(self, api_key: str, base_url: str | None = None, timeout_s: float = 120.0):
        self.base_url = (base_url or DEFAULT_ANTHROPIC_URL).rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[: -len("/v1")]
        self.http = httpx.Client(
            timeout=timeout_s,
            headers={"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"},
        )

    def _get(self, path: str) -> httpx.Response:
        response = self.http.get(path if path.startswith("http") else f"{self.base_url}{path}")
        response.raise_for_status()
        return response

    def submit(self, requests: list[tuple[str, dict[str, Any]]], tag: str) -> str:
        """``tag`` has no place in this API (see the module docstring: :meth:`find`)."""
        payload = {"requests": [{"custom_id": cid, "params": body} for cid, body in requests]}
        response = self.http.post(f"{self.base_url}/v1/messages/batches", json=payload)
        response.raise_for_status()
        return str(response.json()["id"])

    def poll(self, batch_id: str) -> BatchState:
        data = self._get(f"/v1/messages/batches/{batch_id}").json()
        counts = {k: int(v) for k, v in (data.get("request_counts") or {}).items()}
        status = str(data.get("processing_status"))
        return BatchState(status=status, ended=status == "ended", counts=counts)

    def describe(self, batch_id: str) -> ProviderBatch:
        """The batch's size, and once it ended its requests' ``custom_id`` set from its results
        (the API shows no request body, and no requests before the end)."""
        data = self._get(f"/v1/messages/batches/{batch_id}").json()
        total = sum(int(v) for v in (data.get("request_counts") or {}).values())
        if data.get("processing_status") != "ended":
            return ProviderBatch(tags_shown=False, total=total or None)
        return ProviderBatch(
            tags_shown=False, total=total or None, requests=dict.fromkeys(self.results(batch_id), None)
        )

    def find(self, tag: str, requests: int, since: float, known: Collection[str]) -> str | None:
        """The one batch not in ``known`` created within the window around ``since`` with
        ``requests`` requests; None when there is none or more than one."""
        found: list[str] = []
        after: str | None = None
        for _ in range(FIND_PAGES):
            page = self._get(f"/v1/messages/batches?limit=100{f'&after_id={after}' if after else ''}").json()
            for batch in page.get("data") or []:
                created = _epoch(batch.get("created_at"))
                total = sum(int(v) for v in (batch.get("request_counts") or {}).values())
                if created is None or abs(created - since) > FIND_WINDOW_S:
                    continue
                if total == requests and str(batch.get("id")) not in known:
                    found.append(str(batch["id"]))
            if not page.get("has_more") or not page.get("last_id"):
                break
            oldest = _epoch((page.get("data") or [{}])[-1].get("created_at"))
            if oldest is not None and oldest < since - FIND_WINDOW_S:
                break
            after = str(page["last_id"])
        return found[0] if len(found) == 1 else None

    def results(self, batch_id: str) -> dict[str, RequestResult]:
        data = self._get(f"/v1/messages/batches/{batch_id}").json()
        url = data.get("results_url") or f"/v1/messages/batches/{batch_id}/results"
        found: dict[str, RequestResult] = {}
        for row in _jsonl(self._get(url).text):
            result = row.get("result") or {}
            kind = result.get("type")
            if kind == "succeeded":
                found[str(row["custom_id"])] = RequestResult(body=result.get("message"))
            elif kind == "expired":
                found[str(row["custom_id"])] = RequestResult(
                    error="the batch expired before this request ran", expired=True
                )
            elif kind == "canceled":
                found[str(row["custom_id"])] = RequestResult(error="the batch was canceled before this request ran")
            else:
                found[str(row["custom_id"])] = RequestResult(error=_error_text(result.get("error")))
        return found
