"""``ape serve`` left running: the README example (examples/arithmetic) served by a server APE
starts, run ``--runs`` times one after another, with the serving process's memory, threads,
open descriptors, the server's database and the output folder measured after chosen runs.

The runs are started by hand through the API (``POST /deployments/{id}/create_flow_run``,
what the UI's "Run" button sends), the next once the last has ended, so a run never waits for
another and the soak takes as long as its runs. A figure that grows run after run (RSS,
threads, descriptors) is a leak; the database and the output folder grow by a fixed amount a
run.

    python benchmarks/serve_soak.py                    # 30 runs, figures after 1, 10, 20, 30
    python benchmarks/serve_soak.py --runs 5 --at 1,5  # a smoke test
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from ape import server, server_db  # noqa: E402

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def folder_bytes(folder: Path) -> tuple[int, int]:
    """Apparent bytes and files under ``folder``."""
    total = files = 0
    for path in folder.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
            files += 1
    return total, files


def sample(proc: psutil.Process, database: Path, output: Path) -> dict[str, float]:
    """The serving process's RSS (MB), threads and open descriptors, the database's size (MB),
    the output folder's size (MB) and files."""
    size, files = folder_bytes(output)
    return {
        "rss_mb": proc.memory_info().rss / 1e6,
        "threads": proc.num_threads(),
        "fds": proc.num_fds(),
        "children": len(proc.children(recursive=True)),
        "db_mb": server_db.database_size(database) / 1e6,
        "output_mb": size / 1e6,
        "output_files": files,
    }


def wait_deployment(client, name: str, proc: subprocess.Popen, limit_s: float = 300) -> str:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ape serve ended with exit code {proc.returncode}")
        found = client.get(f"/deployments/name/{name}")
        if found.status_code == 200:
            return str(found.json()["id"])
        time.sleep(1)
    raise SystemExit(f"no deployment {name} after {limit_s:g} s")


def call(client, method: str, path: str, **kwargs):
    """``client.request`` again while the server answers 503 (SQLite busy on a loaded machine),
    as Prefect's own client does."""
    delay = 0.5
    for _ in range(8):
        response = client.request(method, path, **kwargs)
        if response.status_code != 503:
            break
        time.sleep(delay)
        delay = min(2 * delay, 8)
    response.raise_for_status()
    return response


def run_once(client, deployment_id: str, proc: subprocess.Popen, limit_s: float = 900) -> tuple[str, float]:
    """Start one flow run of the deployment and wait for its end: (final state, seconds)."""
    started = time.perf_counter()
    created = call(client, "POST", f"/deployments/{deployment_id}/create_flow_run", json={"parameters": {}})
    flow_run_id = created.json()["id"]
    while time.perf_counter() - started < limit_s:
        if proc.poll() is not None:
            raise SystemExit(f"ape serve ended with exit code {proc.returncode}")
        state = call(client, "GET", f"/flow_runs/{flow_run_id}").json()["state"]["type"]
        if state in FINAL:
            return state, time.perf_counter() - started
        time.sleep(1)
    raise SystemExit(f"flow run {flow_run_id} did not end in {limit_s:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--at", default="1,10,20,30", help="runs after which to measure")
    parser.add_argument("--port", type=int, default=4610, help="of the Prefect server it starts")
    args = parser.parse_args()
    at = {int(part) for part in args.at.split(",")}
    work = Path(tempfile.mkdtemp(prefix="ape-serve-soak-"))
    example = work / "arithmetic"
    shutil.copytree(ROOT / "examples" / "arithmetic", example)
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = server.start(port=args.port, wait_s=600)
    database = server_db.database_path(info.home)
    assert database is not None
    env = dict(os.environ, **server.client_env(info), PREFECT_RUNNER_POLL_FREQUENCY="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "ape", "serve", str(example / "config.toml"), "--name", "soak"]
    log = (work / "serve.log").open("wb")
    proc = subprocess.Popen(command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    load = os.getloadavg()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    rows: list[tuple[int, str, float, dict[str, float]]] = []
    try:
        with server.api_session(info.api_url, timeout=60, auth=server.auth_string(info.home)) as client:
            deployment_id = wait_deployment(client, "benchmark/soak", proc)
            for run in range(1, args.runs + 1):
                state, seconds = run_once(client, deployment_id, proc)
                if run in at:
                    time.sleep(2)  # the flow-run process has ended and been reaped
                    row = sample(psutil.Process(proc.pid), database, example / "output")
                    rows.append((run, state, seconds, row))
                    print(f"{run:>4} {state:<10} {seconds:>6.1f} " + " ".join(f"{k} {v:.1f}" for k, v in row.items()))
                elif state != "COMPLETED":
                    print(f"{run:>4} {state:<10} {seconds:>6.1f}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        server.stop()
    print()
    print("| after run | RSS (MB) | threads | descriptors | database (MB) | output (MB) | output files |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run, _state, _seconds, row in rows:
        print(
            f"| {run} | {row['rss_mb']:.0f} | {row['threads']:.0f} | {row['fds']:.0f} | {row['db_mb']:.1f} | "
            f"{row['output_mb']:.2f} | {row['output_files']:.0f} |"
        )
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
