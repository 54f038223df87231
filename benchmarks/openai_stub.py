"""An OpenAI-compatible stub server that answers after a set latency (``compare.py``'s model).

It stands in for a vLLM or SGLang server so that the harnesses' own cost over real HTTP is
what a benchmark measures: every request is answered ``--latency`` seconds after it arrived,
however many are open, and the stub's own CPU stays small (one asyncio loop, a plain
``asyncio.Protocol`` speaking HTTP/1.1 keep-alive: no framework, since at 500 requests a
second a framework's per-request cost would be the same order as the harness's under test).

- ``POST /v1/chat/completions``: the arithmetic workload's answer, "The answer is N" for a
  last user message holding "A + B" (otherwise "I don't know"); ``stream: true`` is refused.
- ``POST /v1/completions``: for ``[choices]`` scoring: with ``echo`` the prompt comes back as
  tokens (whitespace-led words) with ``text_offset`` and ``token_logprobs`` (null for the
  first, then a value from the token's length), plus one generated token.
- ``GET /v1/models``: the one model.
- ``GET /stats``: requests answered, TCP connections accepted, the most open at once, the first request's and the last
  answer's time (``time.time()``: a harness's start-up to its first call) and the stub's CPU
  seconds;
  ``POST /reset`` zeroes them between rows (a body ``{"latency": s}`` sets the latency).

    python benchmarks/openai_stub.py --port 8000 --latency 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
from typing import Any

SUM = re.compile(r"(\d+)\s*\+\s*(\d+)")
TOKEN = re.compile(r"\s*\S+")


class Stats:
    """What ``/stats`` reports; one per server."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.reset()

    def reset(self) -> None:
        self.answered = 0
        self.connections = 0  # TCP connections accepted: a client that reuses its pool opens few
        self.open = 0
        self.most_open = 0
        self.first: float | None = None
        self.last: float | None = None
        times = os.times()
        self.cpu0 = times.user + times.system

    def as_dict(self) -> dict[str, Any]:
        times = os.times()
        return {
            "answered": self.answered,
            "connections": self.connections,
            "open": self.open,
            "most_open": self.most_open,
            "first_request": self.first,
            "last_answer": self.last,
            "cpu_s": times.user + times.system - self.cpu0,
        }


def chat_answer(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat completion answering the last user message's sum."""
    messages = body.get("messages") or []
    text = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            break
    match = SUM.search(text)
    answer = f"The answer is {int(match[1]) + int(match[2])}" if match else "I don't know"
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": answer}, "logprobs": None, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": len(text.split()), "completion_tokens": 4, "total_tokens": len(text.split()) + 4},
    }


def completion_answer(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI completion; with ``echo`` the prompt's tokens and log-probabilities first."""
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt else ""
    tokens: list[str] = []
    offsets: list[int] = []
    values: list[float | None] = []
    if body.get("echo"):
        for match in TOKEN.finditer(prompt):
            tokens.append(match[0])
            offsets.append(match.start())
            values.append(None if not values else -0.1 * len(match[0].strip()))
    tokens.append(" x")
    offsets.append(len(prompt))
    values.append(-1.0)
    logprobs = None
    if body.get("logprobs") is not None:
        logprobs = {
            "tokens": tokens,
            "text_offset": offsets,
            "token_logprobs": values,
            "top_logprobs": [None if v is None else {t: v} for t, v in zip(tokens, values, strict=True)],
        }
    return {
        "id": "cmpl-stub",
        "object": "text_completion",
        "created": int(time.time()),
        "model": body.get("model", "stub"),
        "choices": [
            {
                "index": 0,
                "text": (prompt if body.get("echo") else "") + " x",
                "logprobs": logprobs,
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": len(tokens) - 1, "completion_tokens": 1, "total_tokens": len(tokens)},
    }


def _reply(status: str, payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class StubProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive and Content-Length bodies: what OpenAI clients send."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.stats.connections += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, _, rest = head[0].partition(" ")
            self.handle(method, rest.split(" ", 1)[0].split("?", 1)[0], body)

    def handle(self, method: str, path: str, body: bytes) -> None:
        stats = self.stats
        if path == "/stats":
            self.send(_reply("200 OK", stats.as_dict()))
            return
        if path == "/reset":
            stats.reset()
            if body:
                stats.latency = float(json.loads(body).get("latency", stats.latency))
            self.send(_reply("200 OK", {}))
            return
        if path.endswith("/models"):
            self.send(_reply("200 OK", {"object": "list", "data": [{"id": "stub", "object": "model"}]}))
            return
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            self.send(_reply("400 Bad Request", {"error": {"message": "body is not JSON"}}))
            return
        if path.endswith("/chat/completions"):
            if request.get("stream"):
                self.send(_reply("400 Bad Request", {"error": {"message": "the stub does not stream"}}))
                return
            payload = chat_answer(request)
        elif path.endswith("/completions"):
            payload = completion_answer(request)
        else:
            self.send(_reply("404 Not Found", {"error": {"message": f"no route {method} {path}"}}))
            return
        if stats.first is None:
            stats.first = time.time()
        stats.open += 1
        stats.most_open = max(stats.most_open, stats.open)
        data = _reply("200 OK", payload)
        if stats.latency:
            asyncio.get_running_loop().call_later(stats.latency, self.answer, data)
        else:
            self.answer(data)

    def answer(self, data: bytes) -> None:
        self.stats.open -= 1
        self.stats.answered += 1
        self.stats.last = time.time()
        self.send(data)

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(host: str, port: int, latency: float) -> None:
    loop = asyncio.get_running_loop()
    stats = Stats(latency)
    server = await loop.create_server(lambda: StubProtocol(stats), host, port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed as READY <port>)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds from request to answer")
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.host, args.port, args.latency))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
