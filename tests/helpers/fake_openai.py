"""An OpenAI-compatible chat-completions endpoint on the loopback, for fault tests.

A real ``ThreadingHTTPServer`` on 127.0.0.1 (any free port) receives the requests the
real client (``langchain-openai``) sends; a test decides each answer with its own
``respond(request) -> reply`` function, so one server serves every scenario: status
codes, dropped connections, answers held back, answers that depend on the item.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DROP = "drop"  # a reply that closes the connection without an answer


@dataclass(frozen=True)
class Request:
    """One chat-completion request as the endpoint saw it."""

    path: str
    body: dict[str, Any]
    auth: str | None


Reply = tuple[int, dict[str, Any]] | str
Respond = Callable[[Request], Reply]


def completion(
    text: str,
    *,
    logprob: float = -0.1,
    prompt_tokens: int = 12,
    completion_tokens: int = 5,
    finish_reason: str = "stop",
    reasoning_tokens: int | None = None,
    fields: dict[str, str] | None = None,
) -> dict:
    """The body of a successful answer ``text``, with one token's log-probability and usage;
    ``finish_reason = "length"`` is an answer cut at the token limit. A reasoning model's
    reply: ``fields`` adds message fields (``reasoning_content``, ``reasoning``) and
    ``reasoning_tokens`` the usage's ``completion_tokens_details``."""
    message: dict[str, Any] = {"role": "assistant", "content": text, **(fields or {})}
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": {"content": [{"token": text, "logprob": logprob, "bytes": None, "top_logprobs": []}]},
            }
        ],
        "usage": usage,
    }


def error_body(message: str) -> dict[str, Any]:
    """The body of an error answer, shaped like OpenAI's."""
    return {"error": {"message": message, "type": "test", "code": None}}


class LoopbackEndpoint:
    """Serves ``respond``'s replies until :meth:`close`; ``requests`` lists what came in."""

    def __init__(self, respond: Respond):
        self.respond = respond
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                request = Request(self.path, body, self.headers.get("authorization"))
                with endpoint.lock:
                    endpoint.requests.append(request)
                reply = endpoint.respond(request)
                if reply == DROP:
                    self.close_connection = True
                    self.connection.close()
                    return
                status, payload = reply
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting and left

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
