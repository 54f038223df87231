"""Batch mode against a loopback batch API: requests, batches, wall time and cost beside an
interactive run of the same items.

    python benchmarks/batch_stub.py [--items 200] [--latency 0.5] [--batch-delay 5] [--dask-workers 2] [--port 4256]

Starts a local Prefect server (state in a temp folder) and the stub of
``tests/helpers/batch_stub.py``, which answers interactive chat calls after ``--latency``
seconds and ends a batch ``--batch-delay`` seconds after it was created (a stand-in for a
provider's turnaround, minutes to 24 h). Then runs ``ape run`` twice on the same items,
prices 1.0 / 2.0 per million input / output tokens:

- interactive: ``solver_workers = 16``;
- batch: ``batch = true``, ``batch_size = 100``, ``batch_wait_s = 2``, ``batch_poll_s = 1``,
  ``solver_workers`` = the number of items (a waiting session holds a worker);
- with ``--dask-workers K``, the batch run again with ``task_runner = "dask"`` and K
  worker processes: each process gathers its own batches (one batcher per process).

Prints one row per mode: model calls (interactive calls, batched requests), batches, polls,
wall time, the run's cost, and the batch run's cost as a share of the interactive one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODEL = """[model]
name = "{name}"
provider = "openai"
model = "stub"
base_url = "{base_url}"
temperature = 0.0
price_input_per_mtok = 1.0
price_output_per_mtok = 2.0
{extra}
"""


def workload(folder: Path, n: int, model: str, workers: int, run_extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.py").write_text(
        "from pydantic import BaseModel\n\n\nclass Item(BaseModel):\n    id: str\n    question: str\n    answer: int\n"
    )
    with (folder / "data.jsonl").open("w") as handle:
        for i in range(n):
            a, b = i + 2, 3 * i + 1
            handle.write(json.dumps({"id": f"q{i:04d}", "question": f"{a} + {b}", "answer": a + b}) + "\n")
    config = folder / "config.toml"
    config.write_text(
        f'name = "batch-bench"\n[data]\nfile = "data.jsonl"\nschema = "schema:Item"\n\n'
        f'[prompt]\ntemplate = "What is {{{{ question }}}}?"\n\n{model}\n'
        f'[adapter]\nimplementation = "last_number"\n\n[checker]\nimplementation = "exact_match"\n\n'
        f'[run]\nsolver_workers = {workers}\noutput = "out"\n{run_extra}\n[cli]\nprogress = false\n'
    )
    return config


def run(config: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """Wall time, the saved sessions' cost and how many were solved."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-progress"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ape run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (config.parent / "out" / "results.jsonl").read_text().splitlines()]
    sessions = [s for row in rows for s in row["sessions"]]
    return wall, sum(s["cost"] or 0.0 for s in sessions), sum(s["outcome"] == "SOLVED" for s in sessions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per interactive call")
    parser.add_argument("--batch-delay", type=float, default=5.0, help="seconds until a batch ends")
    parser.add_argument("--dask-workers", type=int, default=0, help="also a batch run on Dask, this many processes")
    parser.add_argument("--port", type=int, default=4256, help="the local Prefect server's port")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from ape import server
    from tests.helpers.batch_stub import BatchStub

    work = Path(tempfile.mkdtemp(prefix="ape-batch-bench-"))
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=args.port)
    env = dict(os.environ, **server.client_env(info), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    stub = BatchStub(delay_s=args.batch_delay, chat_latency_s=args.latency)
    try:
        interactive = workload(
            work / "interactive", args.items, MODEL.format(name="interactive", base_url=stub.base_url, extra=""), 16
        )
        extra = "batch = true\nbatch_size = 100\nbatch_wait_s = 2\nbatch_poll_s = 1\n"
        batched = workload(
            work / "batch", args.items, MODEL.format(name="batch", base_url=stub.base_url, extra=extra), args.items
        )
        wall_i, cost_i, solved_i = run(interactive, env)
        calls = stub.chat_calls
        polls_before = stub.polls
        wall_b, cost_b, solved_b = run(batched, env)
        print(f"N = {args.items} items, interactive latency {args.latency} s, batch turnaround {args.batch_delay} s")
        print("| mode | model calls | batches | polls | solved | wall s | cost |")
        print("|---|---|---|---|---|---|---|")
        print(f"| interactive (16 workers) | {calls} calls | 0 | 0 | {solved_i} | {wall_i:.1f} | {cost_i:.6f} |")
        print(
            f"| batch ({args.items} workers) | {stub.requests} requests | {stub.submissions} | "
            f"{stub.polls - polls_before} | {solved_b} | {wall_b:.1f} | {cost_b:.6f} |"
        )
        if args.dask_workers:
            dask = workload(
                work / "dask",
                args.items,
                MODEL.format(name="dask", base_url=stub.base_url, extra=extra),
                args.items,
                f'task_runner = "dask"\ndask_workers = {args.dask_workers}\n',
            )
            before = (stub.submissions, stub.requests, stub.polls)
            wall_d, cost_d, solved_d = run(dask, env)
            print(
                f"| batch on Dask ({args.dask_workers} processes, {args.items} workers) | "
                f"{stub.requests - before[1]} requests | {stub.submissions - before[0]} | "
                f"{stub.polls - before[2]} | {solved_d} | {wall_d:.1f} | {cost_d:.6f} |"
            )
        print(
            f"batch cost / interactive cost = {cost_b / cost_i:.3f}; extra chat calls in the batch run: "
            f"{stub.chat_calls - calls}"
        )
    finally:
        stub.close()
        server.stop()


if __name__ == "__main__":
    main()
