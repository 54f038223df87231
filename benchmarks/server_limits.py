"""The cost of taking a model's concurrency slots from the Prefect server instead of in-process.

With a real Prefect server, ``[model] max_concurrency`` is a global concurrency limit on the
server (:mod:`ape.tasks.models.limits.server`): slots are taken in leases of up to 16 and lent
to the workers locally. This script runs the same workload (the mock model sleeping
``latency_s`` per call, ``max_concurrency`` = workers, so the limit is full the whole run)
twice per round, alternating: with ``shared_limits = false`` (the in-process limiter) and with
the server's limit, against one real local Prefect server, each in a fresh child process
(benchmarks/speed.py's child: the item loop plus the wait until the server holds every task
run). It prints wall / ideal for both and their ratio, at 64 and 256 workers; the goal is a
ratio of at most 1.05.

    python benchmarks/server_limits.py              # N=640/64 and N=2,560/256 workers, 2 rounds
    python benchmarks/server_limits.py --quick      # smaller sizes, a smoke test
    python benchmarks/server_limits.py --repeat 3
    python benchmarks/server_limits.py --per-worker 40 --repeat 5   # longer runs: the end wait matters less

Each run also prints the run process's CPU per session, the steadier figure on a shared
machine: the wall of a run that ends with the server's once-a-second flush moves by up to a
second whatever the limiter does, a fifth of the default 64-worker run's ideal 5 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _speed_module():
    """benchmarks/speed.py (workload files, the APE child, the server idle wait), by path."""
    spec = importlib.util.spec_from_file_location("ape_bench_speed", HERE / "speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def workload(speed, folder: Path, n: int, latency: float, workers: int, shared: bool) -> Path:
    """speed.py's workload with ``max_concurrency`` = workers and the limiter chosen."""
    config = speed.make_workload(folder, n, latency, workers, call_log=False)
    text = config.read_text()
    limits = f"max_concurrency = {workers}\nshared_limits = {'true' if shared else 'false'}\n"
    text = text.replace("[adapter]", limits + "[adapter]", 1)
    # a model name per worker count: the limit is named after the model, and the server keeps
    # the value it was created with (the 64-worker rows' 64 held the 256-worker runs to 64)
    text = text.replace('[model]\nname = "mock"', f'[model]\nname = "mock-{workers}"', 1)
    assert f'name = "mock-{workers}"' in text, "speed.py's config changed: name the model per worker count"
    config.write_text(text)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (each runs both limiters)")
    parser.add_argument("--workers", default="64,256", help="comma list of worker counts")
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--per-worker", type=int, default=10, help="items per worker (N = workers x this)")
    parser.add_argument("--port", type=int, default=4252, help="of the Prefect server it starts")
    args = parser.parse_args()
    speed = _speed_module()
    sys.path.insert(0, str(ROOT))
    from ape import server

    work = Path(tempfile.mkdtemp(prefix="ape-limits-bench-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=args.port)
    speed.SERVER_PID = info.pid
    env = dict(
        os.environ,
        **server.client_env(info),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PYTHONPATH=str(ROOT),
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
    )
    rows = []
    try:
        for workers in [int(w) for w in args.workers.split(",")]:
            n = (3 if args.quick else args.per_worker) * workers
            ideal = n * args.latency / workers
            ratios: dict[bool, list[float]] = {False: [], True: []}
            cpu: dict[bool, list[float]] = {False: [], True: []}
            server_cpu: dict[bool, list[float]] = {False: [], True: []}
            for round_ in range(args.repeat):
                for shared in (False, True) if round_ % 2 == 0 else (True, False):
                    folder = work / f"w{workers}-r{round_}-{'server' if shared else 'process'}"
                    config = workload(speed, folder, n, args.latency, workers, shared)
                    speed.wait_until_idle(info.pid)
                    server0 = speed.tree_cpu(info.pid)
                    result = speed.run_child(config, env, idle_first=False)  # idle just above
                    speed.wait_until_idle(info.pid)
                    server_cpu[shared].append(1000 * (speed.tree_cpu(info.pid) - server0) / n)
                    ratios[shared].append(result["loop_s"] / ideal)
                    cpu[shared].append(1000 * result["cpu_loop_s"] / n)
                    print(
                        f"{workers:>4} workers  {'server ' if shared else 'process'}  wall/ideal "
                        f"{ratios[shared][-1]:.3f}  (loop {result['loop_s']:.1f} s, "
                        f"CPU per session: run process {cpu[shared][-1]:.2f} ms, "
                        f"server {server_cpu[shared][-1]:.2f} ms)",
                        flush=True,
                    )
            process, shared_ = statistics.median(ratios[False]), statistics.median(ratios[True])
            both = {k: [a + b for a, b in zip(cpu[k], server_cpu[k])] for k in (False, True)}
            cpu_ratio = statistics.median(both[True]) / statistics.median(both[False])
            rows.append((workers, n, process, shared_, cpu_ratio))
    finally:
        server.stop()
        time.sleep(0.5)
    print()
    header = f"{'workload':<30} {'process':>8} {'server':>8} {'server/process':>15}  goal"
    print(f"{header}  {'CPU (run + server) server/process':>34}")
    for workers, n, process, shared_, cpu_ratio in rows:
        print(
            f"{f'N={n}, {args.latency} s, {workers} workers':<30} {process:>8.3f} {shared_:>8.3f} "
            f"{shared_ / process:>15.3f}  <= 1.05  {cpu_ratio:>34.3f}"
        )


if __name__ == "__main__":
    main()
