"""Run every shipped example and keep its outputs, or compare two such snapshots.

A refactor that keeps every behaviour leaves every example's numbers unchanged. This script
shows that: `snapshot DIR` runs each `examples/*/config*.toml` in a fresh copy of its
folder (always the same copy path, so the recorded file paths agree) and writes a normalised
`report.json`, `leaderboard.md` and each Parquet table of it under DIR; `compare A B` says,
per example and file, whether two snapshots agree, and exits 1 when one does not.

Normalising removes only what changes from one run to the next on the same machine: times
(latencies, wall seconds, save and generation times), run ids and the host's paths of the
working copy. Everything else, every score, interval, count, outcome and token, must be equal.

    python benchmarks/example_outputs.py snapshot /tmp/before          # at the old commit
    python benchmarks/example_outputs.py snapshot /tmp/after           # at the new one
    python benchmarks/example_outputs.py compare /tmp/before /tmp/after

`--only NAME` runs the examples whose folder or config name contains NAME, `--skip NAME`
leaves them out; `--no-llm` skips the configs that need the llm extra (SmolLM2 through
llama-cpp). A snapshot records each run's exit code and log too: an example that fails
fails the same way in both snapshots, or the comparison says so. A sampled mock model
(``sampling = true``, the arithmetic example's ``mock-sloppy``) draws per call of its own
instance, and each solver worker has one: with several workers its numbers depend on which
worker took which item, from one run to the next of the same code. `--workers 1` makes
such examples repeatable; the `sessions.jsonl` tables keep per-run order and check times.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
WORK = Path(tempfile.gettempdir()) / "ape-example-outputs"
WORKERS: int | None = None  # --workers: the solver workers of every run (default: each example's own)

# keys and columns whose values are clocks, durations or run identities; and the hash of the
# resolved config, which holds the port a llama-cpp model was served on for that run
VOLATILE = re.compile(
    r"(latency|seconds|runtime|_s$|_at$|time|duration|run_id|elapsed|started|ended|git_|config_resolved_sha256)", re.I
)
# leaderboard.md cells and lines carrying times
MD_TIME = re.compile(r"\b\d+(\.\d+)? s\b")


def configs(only: str | None, no_llm: bool, skip: list[str]) -> list[Path]:
    found = sorted(EXAMPLES.glob("*/config*.toml"))
    if only:
        found = [p for p in found if only in f"{p.parent.name}/{p.name}"]
    found = [p for p in found if not any(name in f"{p.parent.name}/{p.name}" for name in skip)]
    if no_llm:
        found = [p for p in found if 'provider = "llama-cpp"' not in p.read_text(encoding="utf-8")]
    return found


def scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<volatile>" if VOLATILE.search(k) else scrub(v)) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str):
        return value.replace(str(WORK), "<work>")
    return value


def normalise_markdown(text: str) -> str:
    header: list[str] = []
    out = []
    for line in text.splitlines():
        if not line.startswith("|"):
            header = []
        elif not header:
            header = [c.strip() for c in line.split("|")]
        else:
            cells = line.split("|")
            volatile = [i < len(header) and bool(VOLATILE.search(header[i])) for i in range(len(cells))]
            line = "|".join("<volatile>" if v else c for v, c in zip(volatile, cells, strict=True))
        out.append(MD_TIME.sub("<time>", line.replace(str(WORK), "<work>")))
    return "\n".join(out) + "\n"


def normalise_table(path: Path) -> str:
    frame = pd.read_parquet(path)
    for column in frame.columns:
        if VOLATILE.search(str(column)):
            frame[column] = "<volatile>"
        elif frame[column].dtype == object:
            frame[column] = frame[column].map(lambda v: v.replace(str(WORK), "<work>") if isinstance(v, str) else v)
    return normalise_rows(frame.to_json(orient="records", lines=True, double_precision=12, default_handler=str))


def normalise_rows(text: str) -> str:
    """A table's rows in a fixed order (sessions are saved in the order workers finish them),
    without their line numbers in results.jsonl, and with the times inside a JSON cell
    (a code check's ``duration_s``) removed."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        row.pop("line", None)
        for key, value in row.items():
            if isinstance(value, str) and value.startswith("{"):
                try:
                    row[key] = json.dumps(scrub(json.loads(value)), sort_keys=True)
                except ValueError:
                    pass
        rows.append(row)
    order = ("model_id", "item_id", "run_index", "model_a", "model_b", "category", "index")
    rows.sort(key=lambda r: tuple(str(r.get(k, "")) for k in order) + (json.dumps(r, sort_keys=True),))
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def run_example(config: Path, target: Path) -> tuple[bool, float]:
    name = f"{config.parent.name}-{config.stem}"
    copy = WORK / config.parent.name
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(config.parent, copy, ignore=shutil.ignore_patterns("output", "__pycache__"))
    output = (copy / tomllib.loads(config.read_text(encoding="utf-8")).get("run", {}).get("output", "output")).resolve()
    if not output.is_relative_to(copy):  # an example that writes beside the repository's output/
        shutil.rmtree(output, ignore_errors=True)
    started = time.perf_counter()
    workers = ["--workers", str(WORKERS)] if WORKERS else []
    proc = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(copy / config.name), "--no-progress", *workers],
        capture_output=True,
        text=True,
        cwd=copy,
    )
    took = time.perf_counter() - started
    out = target / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "exit_code").write_text(f"{proc.returncode}\n")
    (out / "run.log").write_text(proc.stdout + proc.stderr)
    reports = sorted({*copy.rglob("report.json"), *output.rglob("report.json")})
    for report in reports:
        folder = report.parent
        rel = folder.relative_to(copy) if folder.is_relative_to(copy) else folder.relative_to(output.parent)
        dest = out / str(rel).replace("/", "__")
        dest.mkdir(parents=True, exist_ok=True)
        data = json.loads(report.read_text(encoding="utf-8"))
        (dest / "report.json").write_text(json.dumps(scrub(data), indent=1, sort_keys=True) + "\n")
        board = folder / "leaderboard.md"
        if board.exists():
            (dest / "leaderboard.md").write_text(normalise_markdown(board.read_text(encoding="utf-8")))
        for table in sorted(folder.glob("*.parquet")):
            (dest / f"{table.stem}.jsonl").write_text(normalise_table(table))
    return proc.returncode == 0 and bool(reports), took


def snapshot(target: Path, only: str | None, no_llm: bool, skip: list[str]) -> int:
    target.mkdir(parents=True, exist_ok=True)
    failed = 0
    for config in configs(only, no_llm, skip):
        ok, took = run_example(config, target)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {config.relative_to(ROOT)}  {took:.1f} s", flush=True)
    return 1 if failed else 0


def same_file(a: Path, b: Path) -> bool:
    if not (a.exists() and b.exists()):
        return False
    if a.name == "report.json":  # normalised again, so a snapshot taken before a new rule still compares
        return scrub(json.loads(a.read_text(encoding="utf-8"))) == scrub(json.loads(b.read_text(encoding="utf-8")))
    if a.suffix == ".jsonl":
        return normalise_rows(a.read_text(encoding="utf-8")) == normalise_rows(b.read_text(encoding="utf-8"))
    return filecmp.cmp(a, b, shallow=False)


def compare(before: Path, after: Path) -> int:
    differing = 0
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            print(f"MISSING {name}: only in {'the first' if a.exists() else 'the second'} snapshot")
            differing += 1
            continue
        files = sorted({p.relative_to(root) for root in (a, b) for p in root.rglob("*") if p.is_file()})
        bad = [str(f) for f in files if f.name != "run.log" and not same_file(a / f, b / f)]
        compared = sum(1 for f in files if f.name != "run.log")
        print(f"{'same   ' if not bad else 'DIFFERS'} {name}: {compared - len(bad)}/{compared} files identical")
        for f in bad:
            print(f"    {f}")
        differing += bool(bad)
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="run every example and keep its normalised outputs in DIR")
    snap.add_argument("dir", type=Path)
    snap.add_argument("--only", help="run only the examples whose folder/config name contains this")
    snap.add_argument("--no-llm", action="store_true", help="skip the configs that need the llm extra")
    snap.add_argument("--skip", action="append", default=[], help="skip the configs whose name contains this")
    snap.add_argument("--workers", type=int, default=None, help="solver workers for every run (see the module doc)")
    cmp = sub.add_parser("compare", help="compare two snapshots; exit 1 when one file differs")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        global WORKERS
        WORKERS = args.workers
        return snapshot(args.dir, args.only, args.no_llm, args.skip)
    return compare(args.before, args.after)


if __name__ == "__main__":
    raise SystemExit(main())
