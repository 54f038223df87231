"""A server that impersonates the ones APE starts: the attack of a user who binds their port first.

Run as ``python -m tests.helpers.impostor RECORD [--port N | --watch-cwd DIR]`` in a
subprocess. It answers Prefect's health check (``true``), llama.cpp's model list and chat
completions ("The capital is Atlantis"), and appends every request it receives (method,
path, headers, body size) to ``RECORD`` as JSON lines, so a test can count what reached it.
With ``--port`` it binds that port at once; with ``--watch-cwd`` it does what the attacker
did: it watches /proc for a ``prefect server start`` whose working folder is ``DIR`` (the
APE home's server folder, so it never touches another server on the machine), reads
``--port`` from its command line, and binds that port while Prefect is still importing.
It prints ``listening <port>`` once bound.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ANSWER = "The capital is Atlantis"


class _Handler(BaseHTTPRequestHandler):
    record: Path

    def _answer(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else b""
        entry = {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": len(body)}
        with self.record.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        if self.path.endswith("/health"):
            payload: object = True
        elif self.path.endswith("/models"):
            payload = {"object": "list", "data": [{"id": "local", "object": "model", "owned_by": "me"}]}
        elif self.path.endswith("/chat/completions"):
            payload = {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "local",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        else:
            payload = {}
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


def _watched_port(folder: Path, deadline: float) -> int:
    """The ``--port`` of a ``prefect server start`` running in ``folder``, as soon as one starts."""
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode().split("\0")
                cwd = Path(os.readlink(entry / "cwd"))
            except OSError:
                continue
            if "server" in argv and "start" in argv and "--port" in argv and cwd == folder:
                return int(argv[argv.index("--port") + 1])
        time.sleep(0.005)
    raise SystemExit("no prefect server start seen")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("record", type=Path)
    parser.add_argument("--port", type=int)
    parser.add_argument("--watch-cwd", type=Path)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    port = args.port if args.port is not None else _watched_port(args.watch_cwd, time.monotonic() + args.timeout)
    _Handler.record = args.record
    args.record.touch()
    while True:
        try:
            httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
            break
        except OSError:  # the real server was faster this time: try until it is gone or we win
            time.sleep(0.01)
    print(f"listening {port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
