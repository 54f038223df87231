"""What ``[sandbox] allow_hosts`` adds to each agent command: the forwarder's start, and a request.

    python benchmarks/agent_network.py [--commands 30]

Two sessions side by side, one without ``allow_hosts`` and one with it (the filtering proxy
running, the forwarder started in each command's namespace); ``true`` is run ``--commands``
times in each, alternating, so the machine's load falls on both alike. Prints the median and
p90 wall time of one command in each and the difference of the medians (the forwarder's
start); the same for the namespace alone (``bwrap`` with and without the forwarder, run
directly: no cgroups, no output files); then ``--commands`` plain-HTTP requests through the
proxy to a local server (``curl``), against the same ``curl`` refused by the proxy (a 403
answered without a connection). Seconds from one invocation compare; those of other loads do
not. (CPU time is not shown: what a PID namespace's init leaves to the kernel to reap is
not counted in ``RUSAGE_CHILDREN``.)
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import subprocess
import threading
import time
from typing import Any

from ape.schemas.config import SandboxConfig
from ape.tasks.agent.sandbox import AgentSandbox


class Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def timed(sandbox: AgentSandbox, command: str, walls: list[float]) -> None:
    """Run ``command``; append its wall seconds to ``walls``."""
    began = time.perf_counter()
    result = sandbox.bash(command)
    walls.append(time.perf_counter() - began)
    if result.exit_code != 0:
        raise SystemExit(f"{command!r} failed: {result.text()}")


def show(name: str, seconds: list[float]) -> str:
    p90 = statistics.quantiles(seconds, n=10)[-1]
    return f"{name:<34} median {statistics.median(seconds) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commands", type=int, default=30)
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    item = {"id": "bench"}
    plain_cfg = SandboxConfig(command_timeout_s=60)
    net_cfg = SandboxConfig(command_timeout_s=60, allow_hosts=[f"127.0.0.1:{port}"])
    off: list[float] = []
    on: list[float] = []
    fetched: list[float] = []
    refused: list[float] = []
    with AgentSandbox(plain_cfg, item, "bench", 0) as plain, AgentSandbox(net_cfg, item, "bench", 1) as net:
        timed(plain, "true", [])
        timed(net, "true", [])
        for _ in range(args.commands):
            timed(plain, "true", off)
            timed(net, "true", on)
        for _ in range(args.commands):
            timed(net, f"curl -sSf -m 20 -o /dev/null http://127.0.0.1:{port}/", fetched)
            timed(net, f"curl -sS -m 20 -o /dev/null http://127.0.0.1:{port + 1}/ || true", refused)
        # the namespace alone (no cgroups, no output files): what the forwarder adds, undiluted
        raw_off: list[float] = []
        raw_on: list[float] = []
        for _ in range(args.commands):
            for sandbox, walls in ((plain, raw_off), (net, raw_on)):
                began = time.perf_counter()
                subprocess.run(sandbox.argv(["true"]), env=sandbox._env(), stdin=subprocess.DEVNULL, check=True)
                walls.append(time.perf_counter() - began)
    server.shutdown()
    print(show("true, no allow_hosts", off))
    print(show("true, allow_hosts (forwarder)", on))
    extra = (statistics.median(on) - statistics.median(off)) * 1000
    print(f"{'forwarder start (median on - off)':<34} {extra:7.1f} ms")
    for name, walls in (("bwrap + true alone, no allow_hosts", raw_off), ("bwrap + forwarder + true alone", raw_on)):
        p90 = statistics.quantiles(walls, n=10)[-1]
        print(f"{name:<34} median {statistics.median(walls) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms")
    print(show("curl through the proxy", fetched))
    print(show("curl refused by the proxy (403)", refused))


if __name__ == "__main__":
    main()
