"""The HTTP client stack's own floor at many threads: the same requests to the same stub
through each layer APE's OpenAI-compatible model calls go through, without APE.

Why: at 256 solver workers over HTTP, a run's distance to the ideal time is set by what one
interpreter spends per request, and most of that belongs to the client libraries, not to
APE. This script measures each layer alone, so a goal for the whole run can be read against
what its client stack can do on the same machine:

- ``http.client``: one kept-alive stdlib connection per thread (``compare.py``'s pool row);
- ``httpx``: one shared ``openai.DefaultHttpxClient``, the SDK's own HTTP client and
  connection pool (its limits: 1,000 connections, 100 kept alive), posting the JSON itself;
- ``openai``: the OpenAI SDK's ``chat.completions.create`` on one shared client;
- ``langchain``: ``ChatOpenAI.invoke`` on one shared model, as APE builds it (one per
  ``[model]`` section and process).

Each layer sends N chat requests from ``--threads`` threads to ``benchmarks/openai_stub.py``
(answering each ``--latency`` seconds after it arrived), after one warm-up wave that opens the
connections. Printed per layer and round: wall / ideal (ideal = N x latency / threads) and
the process's CPU milliseconds per request.

    python benchmarks/http_clients.py --repeat 3
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import Stub, chat_messages, stdlib_chat  # noqa: E402  (the benchmarks folder is not a package)


def httpx_layer(url: str) -> Callable[[int], None]:
    import openai

    client = openai.DefaultHttpxClient(timeout=120)

    def call(i: int) -> None:
        client.post(url + "/chat/completions", json={"model": "stub", "messages": chat_messages(i)}).json()

    return call


def openai_layer(url: str) -> Callable[[int], None]:
    import openai

    client = openai.OpenAI(base_url=url, api_key="stub")

    def call(i: int) -> None:
        client.chat.completions.create(model="stub", messages=chat_messages(i))  # type: ignore[arg-type]

    return call


def langchain_layer(url: str) -> Callable[[int], None]:
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    model = ChatOpenAI(base_url=url, api_key=SecretStr("stub"), model="stub")

    def call(i: int) -> None:
        model.invoke(chat_messages(i))

    return call


LAYERS: dict[str, Callable[[str], Callable[[int], object]]] = {
    "http.client": stdlib_chat,
    "httpx": httpx_layer,
    "openai": openai_layer,
    "langchain": langchain_layer,
}


def measure(call: Callable[[int], object], n: int, threads: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of n calls from ``threads`` threads, after a warm-up
    wave of one call per thread."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(call, range(threads)))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        list(pool.map(call, range(n)))
        return time.perf_counter() - wall0, time.process_time() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2560)
    parser.add_argument("--threads", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma list of: " + ", ".join(LAYERS))
    args = parser.parse_args()
    names = [name.strip() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in names if name not in LAYERS]
    if unknown:
        parser.error(f"unknown layer(s) {', '.join(unknown)}; choose from {', '.join(LAYERS)}")
    ideal = args.n * args.latency / args.threads
    stub = Stub()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    try:
        calls: dict[str, Any] = {name: LAYERS[name](stub.url) for name in names}
        for round_no in range(1, args.repeat + 1):
            for name in names:  # alternating, so the machine's drift falls on every layer alike
                stub.reset(args.latency)
                wall, cpu = measure(calls[name], args.n, args.threads)
                answered = stub.stats()["answered"]
                if answered < args.n + args.threads:
                    raise RuntimeError(f"{name}: the stub answered {answered} of {args.n + args.threads}")
                ratio, per_request = wall / ideal, 1e3 * cpu / args.n
                results[name].append((ratio, per_request))
                print(f"round {round_no} {name:12} wall/ideal {ratio:.2f}  CPU {per_request:.2f} ms/request")
    finally:
        stub.stop()
    print(f"\nN={args.n:,}, {args.threads} threads, {args.latency:g} s (ideal {ideal:.1f} s), rounds 1 / 2 / ...:\n")
    print("| layer | wall/ideal | CPU ms per request |")
    print("|---|---|---|")
    for name in names:
        walls = " / ".join(f"{w:.2f}" for w, _ in results[name])
        cpus = " / ".join(f"{c:.2f}" for _, c in results[name])
        print(f"| {name} | {walls} | {cpus} |")


if __name__ == "__main__":
    main()
