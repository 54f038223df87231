"""Scale of the run history: a year of nightly runs, 3 models, 2,000 items each.

Writes 365 runs through :func:`ape.tasks.storage.history.append_run` (the writer the flow uses;
the summary rows are synthetic, with the history monitor's columns and an alarm every 50 runs), then measures:

- the wall and CPU time of ``ape history OUTPUT`` as a user runs it (a fresh process: imports,
  reading the history, printing 1,095 rows, drawing trend.png); goal under 3 s;
- the same for ``ape items OUTPUT`` (the item-health ledger over all 2.19 million item rows);
  goal under 3 s;
- the history's size on disk; goal under 50 MB;
- reading every per-item row back with pandas (2.19 million rows), for reference;
- the history monitor's step for one model's next run (reads the reference's item files).

Usage: python benchmarks/history_scale.py [--runs 365] [--models 3] [--items 2000]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from ape.tasks.storage.history import append_run, history_dir


def build(top: Path, runs: int, models: int, items: int) -> None:
    rng = np.random.default_rng(1)
    item_ids = [f"item-{i:05d}" for i in range(items)]
    hashes = [f"{h:016x}" for h in rng.integers(0, 2**63, size=items)]
    start = datetime(2026, 1, 1, 3, tzinfo=UTC)
    first_run = ""
    for r in range(runs):
        when = start + timedelta(days=r)
        run_id = f"{when:%Y%m%dT%H%M%SZ}-{r:08x}"
        first_run = first_run or run_id
        frames, rows = [], []
        for m in range(models):
            accuracy = 0.6 + 0.1 * m
            passed = rng.random(items) < accuracy
            frames.append(
                pd.DataFrame(
                    {
                        "model_id": f"model-{m}",
                        "item_id": item_ids,
                        "item_hash": hashes,
                        "score": passed.astype(float),
                        "passed": passed,
                        "n": 1,
                        "c": passed.astype("int64"),
                    }
                )
            )
            mean = float(passed.mean())
            half = 1.96 * (mean * (1 - mean) / items) ** 0.5
            rows.append(
                {
                    "benchmark": "scale",
                    "model_id": f"model-{m}",
                    "flow_run_id": None,
                    "cache_scope": "run",
                    "started_at": when,
                    "finished_at": when + timedelta(minutes=20),
                    "n_items": items,
                    "n_sessions": items,
                    "mean_score": mean,
                    "score_se": half / 1.96,
                    "ci_low": mean - half,
                    "ci_high": mean + half,
                    "pass_rate": mean,
                    "pass_at_k": "{}",
                    "input_tokens": 100 * items,
                    "output_tokens": 20 * items,
                    "errors": 0,
                    "check_errors": 0,
                    "config_fingerprint": "c",
                    "data_fingerprint": "d",
                    "checker_fingerprint": "k",
                    "history_run": "x" if r else None,
                    "history_verdict": ("no detectable change" if r % 50 else "regressed") if r else None,
                    "history_diff": 0.0 if r else None,
                    "history_z": float(rng.normal()) if r else None,
                    "history_se": half / 1.96 if r else None,
                    "history_limit": 3.45,
                    "history_h": 2.65,
                    "history_k": 1.0,
                    "history_cusum_up": 0.0,
                    "history_cusum_down": 0.5,
                    "history_reference_mean": mean if r else None,
                    "history_reference_runs": min(r, 30),
                    "history_start": first_run,
                    "history_change": None if r % 50 else "alarm",
                    "history_joins": bool(r % 50),
                }
            )
        append_run(top, run_id, rows, pd.concat(frames, ignore_index=True))


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=365)
    parser.add_argument("--models", type=int, default=3)
    parser.add_argument("--items", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ape-history-scale-") as tmp:
        top = Path(tmp)
        started = time.perf_counter()
        build(top, args.runs, args.models, args.items)
        print(
            f"wrote {args.runs} runs x {args.models} models x {args.items} items in "
            f"{time.perf_counter() - started:.1f} s"
        )
        times, cpu, done = timed(["history", str(top)])
        lines = sum(1 for line in done.stdout.splitlines() if line.startswith("| model-"))
        size = size_mb(history_dir(top))
        started = time.perf_counter()
        items = pd.read_parquet(history_dir(top) / "items")
        read_s = time.perf_counter() - started
        print(
            f"`ape history`: {min(times):.2f} s best, {max(times):.2f} s worst of 3 "
            f"({lines} rows printed, trend.png {(top / 'trend.png').stat().st_size / 1e3:.0f} kB); "
            f"goal < 3 s: {'met' if max(times) < 3 else 'NOT met'}; CPU time {min(cpu):.2f} s best, "
            f"{max(cpu):.2f} s worst (wall above CPU is waiting for a busy machine's cores or disk)"
        )
        items_times, items_cpu, ledger = timed(["items", str(top)])
        flagged = next((line for line in ledger.stdout.splitlines() if "flagged" in line), "")
        print(
            f"`ape items`: {min(items_times):.2f} s best, {max(items_times):.2f} s worst of 3 ({flagged.strip()}); "
            f"goal < 3 s: {'met' if max(items_times) < 3 else 'NOT met'}; CPU time {min(items_cpu):.2f} s best, "
            f"{max(items_cpu):.2f} s worst"
        )
        print(f"history on disk: {size:.1f} MB; goal < 50 MB: {'met' if size < 50 else 'NOT met'}")
        print(f"pandas.read_parquet of every per-item row: {len(items):,} rows in {read_s:.2f} s")
        print(f"judging one model's next run against its history (a {WINDOW}-run reference): {judge_s(top):.2f} s")


WINDOW = 30


def timed(command: list[str]) -> tuple[list[float], list[float], subprocess.CompletedProcess]:
    """Wall and CPU seconds of three runs of ``python -m ape COMMAND`` in fresh processes."""
    times, cpu = [], []
    for _ in range(3):
        started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-m", "ape", *command], capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(time.perf_counter() - started)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        assert done.returncode == 0, done.stderr
    return times, cpu, done


def judge_s(top: Path) -> float:
    """Wall time of the history monitor's step for one model's new run (what a new run adds per model)."""
    from ape.schemas.config import MonitorConfig
    from ape.tasks.stats.history_verdicts import history_verdict
    from ape.tasks.storage.history import read_items, read_runs

    runs = read_runs(top)
    newest = runs.iloc[-1]
    current = read_items(top, newest["run_id"], "model-0")
    prints = {"config_fingerprint": "c", "data_fingerprint": "d", "checker_fingerprint": "k"}
    started = time.perf_counter()
    history_verdict(
        top,
        "model-0",
        "29990101T000000Z-ffffffff",
        current,
        prints,
        MonitorConfig(window=WINDOW),
        runs=runs,
        pinned=None,
        finished=pd.Timestamp.now(tz="UTC"),
    )
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
