"""The two batch APIs APE speaks: OpenAI-compatible ``/v1/files`` + ``/v1/batches``, and
Anthropic's ``/v1/messages/batches``.

Each client does three things and nothing else: :meth:`BatchClient.submit` sends a list
of requests (each with its ``custom_id`` and its request body) and returns the batch id;
:meth:`BatchClient.poll` returns the batch's :class:`BatchState`; :meth:`BatchClient.results`
returns what each request came to, by ``custom_id``: the provider's answer body, or the
provider's error message. Gathering, the ledger and waiting are
:mod:`ape.tasks.models.batcher`'s job.

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
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

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

    def submit(self, requests: list[tuple[str, dict[str, Any]]]) -> str: ...
    def poll(self, batch_id: str) -> BatchState: ...
    def results(self, batch_id: str) -> dict[str, RequestResult]: ...


def _jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


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

    def submit(self, requests: list[tuple[str, dict[str, Any]]]) -> str:
        lines = "".join(
            json.dumps({"custom_id": cid, "method": "POST", "url": CHAT_ENDPOINT, "body": body}) + "\n"
            for cid, body in requests
        )
        uploaded = self.client.files.create(file=("ape-batch.jsonl", lines.encode()), purpose="batch")
        batch = self.client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT_ENDPOINT, completion_window=self.completion_window
        )
        return str(batch.id)

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

    def submit(self, requests: list[tuple[str, dict[str, Any]]]) -> str:
        payload = {"requests": [{"custom_id": cid, "params": body} for cid, body in requests]}
        response = self.http.post(f"{self.base_url}/v1/messages/batches", json=payload)
        response.raise_for_status()
        return str(response.json()["id"])

    def poll(self, batch_id: str) -> BatchState:
        data = self._get(f"/v1/messages/batches/{batch_id}").json()
        counts = {k: int(v) for k, v in (data.get("request_counts") or {}).items()}
        status = str(data.get("processing_status"))
        return BatchState(status=status, ended=status == "ended", counts=counts)

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
