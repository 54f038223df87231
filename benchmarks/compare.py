"""APE side by side with inspect_ai and a plain thread pool, in one invocation.

The same workloads run through:

- ``ape``: APE with its defaults (one live task run per session, every stage recorded
  as a task run, so the chain is visible in the UI);
- ``ape-no-chain``: APE with ``stage_runs = false`` (only the live session task runs: the
  cost of showing the chain is the difference to ``ape``);
- ``ape-stage``: APE with ``task_granularity = "stage"`` (five live task runs per session);
- ``inspect_ai``: inspect_ai's ``eval`` with a solver that sleeps the same latency
  (``max_samples`` = workers, mockllm model, no display, logs to a temp folder);
- ``pool``: a ``ThreadPoolExecutor`` of the same size calling ``time.sleep`` (the limit).

Printed as ratios measured in this run: wall / ideal at N=200, 0.5 s, 16 workers and
N=640, 0.5 s, 64 workers (ideal = N x latency / workers, the item loop only; for APE the
loop runs until the Prefect server has recorded every task run of the run, as ``ape run``
waits for it: the cost of monitoring is counted),
items/s with an instant model at N=2000, and start-up to the first model call (process
start to first call, with a Prefect server already running for APE). Each system runs in
a fresh child process. Needs the ``bench`` extra (inspect-ai) and ``psutil``.

    python benchmarks/compare.py            # 10-25 minutes on 2 busy cores
    python benchmarks/compare.py --quick    # smaller sizes, a smoke test
    python benchmarks/compare.py --systems ape,inspect_ai,pool   # a subset
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SYSTEMS = ("ape", "ape-no-chain", "ape-stage", "inspect_ai", "pool")
RUN_EXTRA = {"ape": "", "ape-no-chain": "stage_runs = false\n", "ape-stage": 'task_granularity = "stage"\n'}


def _speed_module():
    """benchmarks/speed.py (workload files, the APE child, the server idle wait), by path."""
    spec = importlib.util.spec_from_file_location("ape_bench_speed", HERE / "speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


speed = _speed_module()


# --------------------------------------------------------------------------- children


def first_call_time(call_log: Path) -> float | None:
    try:
        with call_log.open() as handle:
            return json.loads(handle.readline())["time"]
    except (OSError, ValueError, KeyError):
        return None


def child_ape(config: str, process_start: float) -> None:
    """One APE run (speed.py's child) plus the time of its first model call."""
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        speed.child(config)
    result = json.loads(buffer.getvalue().split("RESULT ", 1)[1])
    first = first_call_time(Path(config).parent / "calls.log")
    result["startup_s"] = None if first is None else first - process_start
    print("RESULT " + json.dumps(result))


def child_inspect(n: int, latency: float, workers: int, log_dir: str, process_start: float) -> None:
    """The same workload as an inspect_ai task: a solver that sleeps ``latency`` per sample."""
    import asyncio

    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import Score, Target, accuracy, match, scorer
    from inspect_ai.solver import Generate, TaskState, solver

    first: list[float] = []
    span: list[float] = []  # perf_counter of the first solver start and the last scored sample

    @solver
    def sleeping_solver():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            if not first:
                first.append(time.time())
                span.append(time.perf_counter())
            if latency:
                await asyncio.sleep(latency)
            a, b = state.metadata["a"], state.metadata["b"]
            state.output.completion = f"The answer is {a + b}"
            return state

        return solve

    samples = []
    for i in range(n):
        a, b = i % 97, (i * 7) % 89
        samples.append(Sample(input=f"What is {a} + {b}?", target=str(a + b), id=f"i{i}", metadata={"a": a, "b": b}))

    @scorer(metrics=[accuracy()])
    def timed_match():
        inner = match()

        async def score(state: TaskState, target: Target) -> Score:
            result = await inner(state, target)
            del span[1:]
            span.append(time.perf_counter())
            return result

        return score

    task = Task(dataset=samples, solver=sleeping_solver(), scorer=timed_match())
    logs = eval(
        task,
        model="mockllm/model",
        max_samples=workers,
        max_connections=workers,
        display="none",
        log_dir=log_dir,
        log_samples=True,
    )
    # the item loop, as APE's wall_seconds: first sample started to last sample scored
    # (eval's own start-up is reported apart, as start-up to the first call)
    loop = span[-1] - span[0]
    assert logs and logs[0].status == "success", logs[0].error if logs else "no log"
    print("RESULT " + json.dumps({"loop_s": loop, "startup_s": first[0] - process_start if first else None}))


def child_pool(n: int, latency: float, workers: int, process_start: float) -> None:
    """The limit: a thread pool calling time.sleep."""
    from concurrent.futures import ThreadPoolExecutor

    first: list[float] = []

    def work(i: int) -> int:
        if not first:
            first.append(time.time())
        if latency:
            time.sleep(latency)
        return i

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        sum(pool.map(work, range(n)))
    loop = time.perf_counter() - started
    print("RESULT " + json.dumps({"loop_s": loop, "startup_s": first[0] - process_start}))


# --------------------------------------------------------------------------- driver


def run_one(system: str, folder: Path, n: int, latency: float, workers: int, env: dict) -> dict:
    speed.wait_until_idle(speed.SERVER_PID)
    args = [
        "--child",
        system,
        "--n",
        str(n),
        "--latency",
        str(latency),
        "--workers",
        str(workers),
        "--folder",
        str(folder),
    ]
    if system.startswith("ape"):
        config = speed.make_workload(folder, n, latency, workers)
        text = config.read_text().replace('output = "out"\n', 'output = "out"\n' + RUN_EXTRA[system])
        config.write_text(text)
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, __file__, *args, "--t0", repr(time.time())], env=env, capture_output=True, text=True, cwd=ROOT
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{system} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--latency", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of " + ", ".join(SYSTEMS))
    args = parser.parse_args()
    if args.child:
        t0 = args.t0 or time.time()
        if args.child.startswith("ape"):
            child_ape(str(Path(args.folder) / "config.toml"), t0)
        elif args.child == "inspect_ai":
            child_inspect(args.n, args.latency, args.workers, str(Path(args.folder) / "logs"), t0)
        else:
            child_pool(args.n, args.latency, args.workers, t0)
        return

    from ape import server

    systems = [s for s in args.systems.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="ape-compare-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=4251)
    speed.SERVER_PID = info.pid
    env = dict(
        os.environ,
        **server.client_env(info),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOCAL_STORAGE_PATH=str(work / "storage"),
        INSPECT_LOG_DIR=str(work / "inspect"),
    )
    q = args.quick
    workloads = [
        ("wall/ideal", *((64, 0.5, 16) if q else (200, 0.5, 16))),
        ("wall/ideal", *((192, 0.5, 64) if q else (640, 0.5, 64))),
        ("items/s", 500 if q else 2000, 0.0, 16),
    ]
    table: dict[str, dict[str, str]] = {}
    startup: dict[str, str] = {}
    recorded: dict[str, str] = {}
    try:
        for index, (measure, n, latency, workers) in enumerate(workloads):
            label = (
                f"{measure} N={n}, {latency:g} s, {workers} workers"
                if latency
                else f"{measure} N={n}, instant, {workers} workers"
            )
            row = table.setdefault(label, {})
            for system in systems:
                r = run_one(system, work / f"{system}-{index}", n, latency, workers, env)
                if r.get("recorded"):
                    final, expected, still_open = r["recorded"]
                    recorded[f"{system} {label}"] = (
                        f"server held {final}/{expected} task runs ({still_open} open), "
                        f"waited {r['record_wait_s']:.1f} s for it"
                    )
                if latency:
                    row[system] = f"{r['loop_s'] / (n * latency / workers):.2f}"
                else:
                    row[system] = f"{n / r['loop_s']:.0f}"
                    if r.get("startup_s") is not None:
                        startup[system] = f"{r['startup_s']:.1f} s"
                print(f"  {system:<11} {label}: {row[system]}", flush=True)
    finally:
        server.stop()
    table["start-up to first model call"] = startup
    print()
    print("| measure | " + " | ".join(systems) + " |")
    print("|---" * (len(systems) + 1) + "|")
    for label, row in table.items():
        print(f"| {label} | " + " | ".join(row.get(s, "") for s in systems) + " |")
    ratios = [
        (label, row) for label, row in table.items() if "ape" in row and "inspect_ai" in row and "wall/ideal" in label
    ]
    for label, row in ratios:
        pool = float(row["pool"]) if "pool" in row else None
        ape = float(row["ape"])
        vs_pool = f", {ape / pool:.2f}x the pool" if pool else ""
        print(f"APE default vs inspect_ai, {label}: {ape / float(row['inspect_ai']):.2f}x{vs_pool}")
    for label, row in table.items():
        if label.startswith("items/s") and "ape" in row and "inspect_ai" in row:
            share = float(row["ape"]) / float(row["inspect_ai"])
            print(f"APE default vs inspect_ai, {label}: {share:.2f}x the items/s")
    for system, line in recorded.items():
        print(f"{system}: {line}")


if __name__ == "__main__":
    main()
