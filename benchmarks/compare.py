"""APE side by side with inspect_ai and a plain thread pool, in one invocation.

The same workloads run through:

- ``ape``: APE with its defaults (each session's task run recorded from one event, its
  stage chain recorded while the Prefect server keeps up, so the chain is in the UI);
- ``ape-no-chain``: APE with ``stage_runs = false`` (only the session task runs: the
  cost of showing the chain is the difference to ``ape``);
- ``ape-stage``: APE with ``task_granularity = "stage"`` (five live task runs per session);
- ``inspect_ai``: inspect_ai's ``eval`` with a solver that sleeps the same latency
  (``max_samples`` = workers, mockllm model, no display, logs to a temp folder);
- ``pool``: a ``ThreadPoolExecutor`` of the same size calling ``time.sleep`` (the limit).

Printed as ratios measured in this run: wall / ideal at N=200, 0.5 s, 16 workers, at
N=640, 0.5 s, 64 workers and at N=2,560, 0.5 s, 256 workers (ideal = N x latency / workers,
the item loop only; for APE the loop runs until the Prefect server has recorded every task
run of the run, as ``ape run`` waits for it: the cost of monitoring is counted), items/s
with an instant model at N=2000, and start-up to the first model call (process start to
first call, with a Prefect server already running for APE). ``--memory`` adds APE's peak
memory at N=20,000 over N=2,000 (instant model). Each system runs in a fresh child process.

``--repeat K`` runs the whole set K times in this invocation and ends with each goal and
how often it held:

- APE's wall/ideal no worse than inspect_ai's at 16, 64 and 256 workers, and within 1.05x
  (16 workers) and 1.10x (64 workers) of the pool's;
- APE's items/s with an instant model at least inspect_ai's;
- APE's start-up to the first model call ahead of inspect_ai's;
- with ``--memory``, APE's peak memory at N=20,000 at most 1.5x that at N=2,000.

Needs the ``bench`` extra (inspect-ai) and ``psutil``.

    python benchmarks/compare.py            # 10-25 minutes on 2 busy cores
    python benchmarks/compare.py --quick    # smaller sizes, a smoke test
    python benchmarks/compare.py --systems ape,inspect_ai,pool --repeat 3   # a subset, three rounds
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
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole set in this invocation")
    parser.add_argument("--memory", action="store_true", help="add APE's peak memory at N=20,000 over N=2,000")
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
        ("wall/ideal", *((768, 0.5, 256) if q else (2560, 0.5, 256))),
        ("items/s", 500 if q else 2000, 0.0, 16),
    ]
    if args.memory:
        workloads.append(("peak memory", 5000 if q else 20000, 0.0, 16))
    rounds: list[dict[str, dict[str, str]]] = []
    try:
        for round_index in range(args.repeat):
            if args.repeat > 1:
                print(f"round {round_index + 1} of {args.repeat}", flush=True)
            rounds.append(one_round(systems, workloads, work / f"round-{round_index}", env))
    finally:
        server.stop()
    for index, table in enumerate(rounds):
        print()
        if len(rounds) > 1:
            print(f"round {index + 1}:")
        print_table(table, systems)
    print()
    print_goals(rounds, q)


def _label(measure: str, n: int, latency: float, workers: int) -> str:
    pace = f"{latency:g} s" if latency else "instant"
    return f"{measure} N={n}, {pace}, {workers} workers"


def one_round(systems: list[str], workloads: list, folder: Path, env: dict) -> dict[str, dict[str, str]]:
    """Every workload through every system once: label -> system -> the printed figure."""
    table: dict[str, dict[str, str]] = {}
    startup: dict[str, str] = {}
    peak: dict[str, float] = {}  # APE's peak RSS (MB) of the instant runs, by N
    for index, (measure, n, latency, workers) in enumerate(workloads):
        label = _label(measure, n, latency, workers)
        row = table.setdefault(label, {})
        for system in systems:
            if measure == "peak memory" and system != "ape":
                continue
            r = run_one(system, folder / f"{system}-{index}", n, latency, workers, env)
            if latency:
                row[system] = f"{r['loop_s'] / (n * latency / workers):.2f}"
            elif measure == "items/s":
                row[system] = f"{n / r['loop_s']:.0f}"
                if r.get("startup_s") is not None:
                    startup[system] = f"{r['startup_s']:.1f}"
            if system == "ape" and not latency and r.get("peak_rss_mb"):
                peak[str(n)] = r["peak_rss_mb"]
            if measure == "peak memory":
                small = peak.get(str(2000 if n == 20000 else 500))
                row[system] = f"{r['peak_rss_mb'] / small:.2f}" if small else "?"
            if r.get("recorded"):
                final, expected, still_open = r["recorded"]
                print(
                    f"  {system:<11} {label}: server held {final}/{expected} task runs ({still_open} open), "
                    f"waited {r['record_wait_s']:.1f} s for it",
                    flush=True,
                )
            print(f"  {system:<11} {label}: {row.get(system, '')}", flush=True)
    table["start-up to first model call (s)"] = startup
    return table


def print_table(table: dict[str, dict[str, str]], systems: list[str]) -> None:
    print("| measure | " + " | ".join(systems) + " |")
    print("|---" * (len(systems) + 1) + "|")
    for label, row in table.items():
        print(f"| {label} | " + " | ".join(row.get(s, "") for s in systems) + " |")


def goals(table: dict[str, dict[str, str]], quick: bool) -> list[tuple[str, bool | None]]:
    """Each goal of the module doc and whether it held in ``table`` (None: not measured)."""

    def value(label_start: str, system: str) -> float | None:
        for label, row in table.items():
            if label.startswith(label_start) and row.get(system) not in (None, "", "?"):
                return float(row[system])
        return None

    sizes = {16: 64 if quick else 200, 64: 192 if quick else 640, 256: 768 if quick else 2560}
    out: list[tuple[str, bool | None]] = []
    for workers, pool_bound in ((16, 1.05), (64, 1.10), (256, None)):
        start = f"wall/ideal N={sizes[workers]},"
        ape, peer, pool = value(start, "ape"), value(start, "inspect_ai"), value(start, "pool")
        out.append((f"wall/ideal {workers} workers: APE <= inspect_ai", None if None in (ape, peer) else ape <= peer))
        if pool_bound is not None:
            held = None if None in (ape, pool) else ape <= pool_bound * pool
            out.append((f"wall/ideal {workers} workers: APE <= {pool_bound:.2f}x the pool", held))
    ape, peer = value("items/s", "ape"), value("items/s", "inspect_ai")
    out.append(("items/s, instant: APE >= inspect_ai", None if None in (ape, peer) else ape >= peer))
    ape, peer = value("start-up", "ape"), value("start-up", "inspect_ai")
    out.append(("start-up to first call: APE < inspect_ai", None if None in (ape, peer) else ape < peer))
    ratio = value("peak memory", "ape")
    out.append(("peak memory N=20,000 / N=2,000 <= 1.5", None if ratio is None else ratio <= 1.5))
    return out


def print_goals(rounds: list[dict[str, dict[str, str]]], quick: bool) -> None:
    """How often each goal held over the rounds of this invocation."""
    print("| goal | held |")
    print("|---|---|")
    per_round = [goals(table, quick) for table in rounds]
    for index, (name, _) in enumerate(per_round[0]):
        results = [r[index][1] for r in per_round]
        measured = [r for r in results if r is not None]
        if measured:
            print(f"| {name} | {sum(measured)} of {len(measured)} |")


if __name__ == "__main__":
    main()
