"""A loopback server that speaks both providers' batch APIs, for batch-mode tests and benchmarks.

A real ``ThreadingHTTPServer`` on 127.0.0.1 (any free port):

- OpenAI-compatible: ``POST /v1/files`` (multipart, ``purpose=batch``), ``POST /v1/batches``
  (keeping its ``metadata``), ``GET /v1/batches`` (the list, newest first, one page),
  ``GET /v1/batches/{id}``, ``GET /v1/files/{id}/content``; and ``POST /v1/chat/completions``
  for the interactive run beside a batch run.
- Anthropic: ``POST /v1/messages/batches``, ``GET /v1/messages/batches`` (the list, newest
  first, one page, ``created_at`` in RFC 3339), ``GET /v1/messages/batches/{id}``,
  ``GET /v1/messages/batches/{id}/results``.

A batch is in progress until ``delay_s`` after it was created and at least one poll has
seen it so, then ends: each request is
answered by ``answer(text) -> str`` (default: the sum of the first ``a + b`` in the first user
message, "The answer is N."), or fails with the message ``fail(text)`` returns, or, when
``expire(text)`` is true, is left unanswered as the provider does when a batch's window
closes (OpenAI: status ``expired``, code ``batch_expired`` in the error file; Anthropic:
result type ``expired``). ``submissions`` counts the batches created (what is paid for),
``requests`` the requests in them, ``chat_calls`` the interactive calls, ``lists`` the
listings asked for.
"""

from __future__ import annotations

import email.parser
import email.policy
import itertools
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUM = re.compile(r"(\d+) \+ (\d+)")
PROMPT_TOKENS, COMPLETION_TOKENS = 12, 5


def sum_answer(text: str) -> str:
    found = SUM.search(text)
    return f"The answer is {int(found.group(1)) + int(found.group(2))}." if found else "I do not know."


def first_user_text(body: dict[str, Any]) -> str:
    """The first user message's text of an OpenAI or Anthropic request body."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            return str(content)
    return ""


def _openai_completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        },
    }


def _anthropic_message(text: str) -> dict[str, Any]:
    return {
        "id": "msg_stub",
        "type": "message",
        "role": "assistant",
        "model": "stub",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": COMPLETION_TOKENS},
    }


class BatchStub:
    """Serves both batch APIs until :meth:`close` (see the module docstring)."""

    def __init__(
        self,
        delay_s: float = 0.5,
        answer: Callable[[str], str] = sum_answer,
        fail: Callable[[str], str | None] = lambda text: None,
        expire: Callable[[str], bool] = lambda text: False,
        chat_latency_s: float = 0.0,
    ):
        self.delay_s = delay_s
        self.answer, self.fail, self.expire = answer, fail, expire
        self.chat_latency_s = chat_latency_s
        self.lock = threading.Lock()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.submissions = 0
        self.requests = 0
        self.chat_calls = 0
        self.polls = 0
        self.lists = 0
        self._ids = itertools.count(1)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any, raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json" if raw is None else "application/jsonl")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("content-length", 0)))

            def do_POST(self) -> None:
                raw = self._body()
                if self.path == "/v1/files":
                    self._send(200, stub._upload(self.headers.get("content-type", ""), raw))
                elif self.path == "/v1/batches":
                    self._send(*stub._create_openai(json.loads(raw)))
                elif self.path == "/v1/chat/completions":
                    self._send(200, stub._chat(json.loads(raw)))
                elif self.path == "/v1/messages/batches":
                    if not self.headers.get("x-api-key"):
                        self._send(
                            401, {"type": "error", "error": {"type": "authentication_error", "message": "no key"}}
                        )
                        return
                    self._send(200, stub._create_anthropic(json.loads(raw)))
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                if path == "/v1/batches":
                    self._send(200, stub._list("openai"))
                elif path == "/v1/messages/batches":
                    self._send(200, stub._list("anthropic"))
                elif match := re.fullmatch(r"/v1/batches/([\w-]+)", path):
                    self._send(*stub._openai_batch(match.group(1)))
                elif match := re.fullmatch(r"/v1/files/([\w-]+)/content", path):
                    content = stub.files.get(match.group(1))
                    if content is None:
                        self._send(404, {"error": {"message": "no such file"}})
                    else:
                        self._send(200, None, raw=content)
                elif match := re.fullmatch(r"/v1/messages/batches/([\w-]+)/results", path):
                    self._send(200, None, raw=stub._anthropic_results(match.group(1)))
                elif match := re.fullmatch(r"/v1/messages/batches/([\w-]+)", path):
                    self._send(200, stub._anthropic_batch(match.group(1)))
                else:
                    self._send(404, {"error": {"message": f"no route {path}"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- OpenAI ------------------------------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    def _upload(self, content_type: str, raw: bytes) -> dict[str, Any]:
        message = email.parser.BytesParser(policy=email.policy.default).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw
        )
        content = b""
        for part in message.iter_parts():
            if part.get_param("name", header="content-disposition") == "file":
                content = part.get_payload(decode=True) or b""
        with self.lock:
            file_id = self._new_id("file")
            self.files[file_id] = content
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(content),
            "created_at": 0,
            "filename": "x",
            "purpose": "batch",
        }

    def _create_openai(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        content = self.files.get(body.get("input_file_id", ""))
        if content is None:
            return 404, {"error": {"message": "no such input file"}}
        rows = [json.loads(line) for line in content.decode().splitlines() if line.strip()]
        requests = [(row["custom_id"], row["body"]) for row in rows]
        with self.lock:
            batch_id = self._new_id("batch")
            self.batches[batch_id] = {
                "kind": "openai",
                "created": time.monotonic(),
                "created_at": time.time(),
                "metadata": body.get("metadata"),
                "input_file_id": body.get("input_file_id"),
                "requests": requests,
            }
            self.submissions += 1
            self.requests += len(requests)
        return self._openai_batch(batch_id)

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.chat_calls += 1
        time.sleep(self.chat_latency_s)
        return _openai_completion(self.answer(first_user_text(body)))

    def _ended(self, batch: dict[str, Any]) -> bool:
        # the first look always finds the batch in progress, however late it comes on a busy machine
        if not batch.get("shown_running"):
            batch["shown_running"] = True
            return False
        return time.monotonic() - batch["created"] >= self.delay_s

    def _outcomes(self, batch: dict[str, Any]) -> list[tuple[str, str, str | None]]:
        """(custom id, "ok"/"error"/"expired", answer text or error message) per request."""
        found = []
        for cid, body in batch["requests"]:
            text = first_user_text(body)
            if self.expire(text):
                found.append((cid, "expired", None))
            elif (reason := self.fail(text)) is not None:
                found.append((cid, "error", reason))
            else:
                found.append((cid, "ok", self.answer(text)))
        return found

    def _openai_batch(self, batch_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.polls += 1
            batch = self.batches.get(batch_id)
            if batch is None or batch["kind"] != "openai":
                return 404, {"error": {"message": "no such batch"}}
            n = len(batch["requests"])
            status, output_id, error_id, done, failed = "in_progress", None, None, 0, 0
            if self._ended(batch):
                outcomes = self._outcomes(batch)
                if "files" not in batch:
                    ok_lines, error_lines = [], []
                    for cid, kind, value in outcomes:
                        if kind == "ok":
                            response = {"status_code": 200, "request_id": cid, "body": _openai_completion(str(value))}
                            ok_lines.append({"id": cid, "custom_id": cid, "response": response, "error": None})
                        elif kind == "error":
                            body = {"error": {"message": value, "type": "invalid_request_error", "code": None}}
                            response = {"status_code": 400, "request_id": cid, "body": body}
                            error_lines.append({"id": cid, "custom_id": cid, "response": response, "error": None})
                        else:
                            error = {
                                "code": "batch_expired",
                                "message": "This request could not be executed before the completion window expired.",
                            }
                            error_lines.append({"id": cid, "custom_id": cid, "response": None, "error": error})
                    batch["files"] = []
                    for lines in (ok_lines, error_lines):
                        file_id = None
                        if lines:
                            file_id = self._new_id("file")
                            self.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
                        batch["files"].append(file_id)
                output_id, error_id = batch["files"]
                done = sum(kind == "ok" for _, kind, _ in outcomes)
                failed = n - done
                status = "expired" if any(kind == "expired" for _, kind, _ in outcomes) else "completed"
        return 200, {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "input_file_id": batch.get("input_file_id", "file_in"),
            "completion_window": "24h",
            "status": status,
            "created_at": int(batch["created_at"]),
            "metadata": batch.get("metadata"),
            "output_file_id": output_id,
            "error_file_id": error_id,
            "request_counts": {"total": n, "completed": done, "failed": failed},
        }

    def _list(self, kind: str) -> dict[str, Any]:
        """One page of every batch of ``kind``, newest first, as each provider lists them."""
        with self.lock:
            self.lists += 1
            ids = [i for i, b in self.batches.items() if b["kind"] == kind]
        ids.sort(key=lambda i: self.batches[i]["created_at"], reverse=True)
        data = [self._openai_batch(i)[1] if kind == "openai" else self._anthropic_batch(i) for i in ids]
        if kind == "openai":
            return {"object": "list", "data": data, "has_more": False, "first_id": None, "last_id": None}
        return {"data": data, "has_more": False, "first_id": None, "last_id": None}

    # -- Anthropic -----------------------------------------------------------------------------
    def _create_anthropic(self, body: dict[str, Any]) -> dict[str, Any]:
        requests = [(r["custom_id"], r["params"]) for r in body.get("requests", [])]
        with self.lock:
            batch_id = self._new_id("msgbatch")
            self.batches[batch_id] = {
                "kind": "anthropic",
                "created": time.monotonic(),
                "created_at": time.time(),
                "requests": requests,
            }
            self.submissions += 1
            self.requests += len(requests)
        return self._anthropic_batch(batch_id)

    def _anthropic_batch(self, batch_id: str) -> dict[str, Any]:
        with self.lock:
            self.polls += 1
            batch = self.batches[batch_id]
            n = len(batch["requests"])
            counts = {"processing": n, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            status = "in_progress"
            if self._ended(batch):
                status = "ended"
                counts["processing"] = 0
                for _, kind, _ in self._outcomes(batch):
                    counts[{"ok": "succeeded", "error": "errored", "expired": "expired"}[kind]] += 1
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": status,
            "created_at": datetime.fromtimestamp(batch["created_at"], UTC).isoformat().replace("+00:00", "Z"),
            "request_counts": counts,
            "results_url": f"{self.root_url}/v1/messages/batches/{batch_id}/results" if status == "ended" else None,
        }

    def _anthropic_results(self, batch_id: str) -> bytes:
        lines = []
        for cid, kind, value in self._outcomes(self.batches[batch_id]):
            if kind == "ok":
                result: dict[str, Any] = {"type": "succeeded", "message": _anthropic_message(str(value))}
            elif kind == "error":
                result = {
                    "type": "errored",
                    "error": {"type": "error", "error": {"type": "invalid_request_error", "message": value}},
                }
            else:
                result = {"type": "expired"}
            lines.append(json.dumps({"custom_id": cid, "result": result}) + "\n")
        return "".join(lines).encode()
