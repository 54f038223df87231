"""What the Dask cluster's TLS credentials cost: the same Dask runs with and without them.

APE's local Dask cluster speaks TLS with credentials made for it (``ape.flows.dask_cluster``),
so no other process can submit code to it. This measures what that costs, against the plain
``tcp://`` cluster APE started before (the same LocalCluster arguments, no ``security``):

- ``ape run``: the wall time of ``ape run`` of an instant-model benchmark on
  ``task_runner = "dask"`` (process start to exit, as a user waits for it), its cluster's
  start included;
- ``start``: the cluster's start (its scheduler, two worker processes, the client), and
  ``round trip``: the mean time of 200 tiny tasks submitted one after the other.

Each measurement runs in a fresh child process; the two variants alternate within each round
(``--rounds``), and the last lines give each one's median and range. The plain variant
replaces ``local_cluster`` in the child only; APE itself has no switch for it.

    python benchmarks/dask_tls.py             # about 2 minutes a round on 2 busy cores
    python benchmarks/dask_tls.py --rounds 5 --items 128
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from speed import make_workload  # benchmarks/speed.py, beside this script

ROOT = Path(__file__).resolve().parent.parent


def plain_cluster(workers: int, threads: int) -> dict[str, Any]:
    """The cluster APE started before it had credentials: any local process could connect."""
    return {
        "cluster_kwargs": {
            "n_workers": workers,
            "processes": True,
            "threads_per_worker": threads,
            "dashboard_address": None,
        }
    }


def child(variant: str, what: str, config: str) -> None:
    """One measurement in this fresh process; prints JSON."""
    import ape.flows.dask_cluster as dask_cluster

    if variant == "plain":
        dask_cluster.local_cluster = plain_cluster
    if what == "run":
        from ape.cli import main as ape_main

        code = ape_main(["run", config, "--no-server"])
        print(json.dumps({"code": code}))
        return
    from prefect_dask import DaskTaskRunner

    started = time.perf_counter()
    with DaskTaskRunner(**dask_cluster.local_cluster(2, 2)) as runner:
        client = runner.client
        assert client.submit(abs, -1).result() == 1
        up = time.perf_counter() - started
        t0 = time.perf_counter()
        for i in range(200):
            assert client.submit(abs, -i, pure=False).result() == i
        trip = (time.perf_counter() - t0) / 200
        address = client.scheduler.address
    print(json.dumps({"start_s": up, "round_trip_ms": trip * 1000, "address": address}))


def measure(variant: str, what: str, config: Path, env: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, "--child", variant, what, str(config)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{variant} {what} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spread(values: list[float], unit: str, digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=64)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    sys.path.insert(0, str(ROOT))
    from ape import server

    work = Path(tempfile.mkdtemp(prefix="ape-dask-tls-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=free_port())
    env = dict(
        os.environ,
        **server.client_env(info),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PYTHONPATH=str(ROOT),
    )
    config = make_workload(work / "bench", args.items, 0.0, 4, call_log=False)
    text = config.read_text().replace("output = ", 'task_runner = "dask"\ndask_workers = 2\noutput = ')
    config.write_text(text)
    results: dict[str, dict[str, list[float]]] = {v: {"run": [], "start": [], "trip": []} for v in ("plain", "tls")}
    try:
        for round_ in range(args.rounds):
            for variant in ("plain", "tls") if round_ % 2 == 0 else ("tls", "plain"):
                env["PREFECT_LOCAL_STORAGE_PATH"] = str(work / f"storage-{variant}-{round_}")
                run = measure(variant, "run", config, env)
                (work / "bench" / "out").rename(work / f"out-{variant}-{round_}")  # every run starts afresh
                cluster = measure(variant, "cluster", config, env)
                results[variant]["run"].append(run["wall_s"])
                results[variant]["start"].append(cluster["start_s"])
                results[variant]["trip"].append(cluster["round_trip_ms"])
                print(
                    f"round {round_ + 1} {variant:5} ape run {run['wall_s']:.2f} s, cluster start "
                    f"{cluster['start_s']:.2f} s, round trip {cluster['round_trip_ms']:.2f} ms ({cluster['address']})",
                    flush=True,
                )
    finally:
        server.stop()
    print(f"\nmedians (range) over {args.rounds} rounds, {args.items} items, 2 workers x 2 threads:")
    for variant in ("plain", "tls"):
        r = results[variant]
        print(
            f"{variant:5} ape run {spread(r['run'], 's', 2)}, cluster start {spread(r['start'], 's', 2)}, "
            f"round trip {spread(r['trip'], 'ms', 2)}"
        )


if __name__ == "__main__":
    main()
