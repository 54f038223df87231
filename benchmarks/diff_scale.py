"""Scale of ``ape diff``: two scheduled runs of 2,000 items x 3 models, as a user compares them.

Builds a benchmark of instant mock models (arithmetic, accuracy read from a file), runs it
twice with ``ape run --new-run`` (the second with a lower accuracy, so items flip; a local
Prefect server on port 4255, state in a temp folder), then times in fresh processes:

- ``ape diff OUTPUT previous latest`` (read both runs, pair 6,000 items, print and write
  diff.md and diff.parquet); goal under 3 s;
- the same after a third run whose checker changed, so the earlier run's 6,000 saved
  answers are graded again with the new checker first (no model calls).

Usage: python benchmarks/diff_scale.py [--items 2000] [--models 3]
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

SCHEMA = """from pydantic import BaseModel

from ape import Failed, Passed


class Item(BaseModel):
    id: str
    question: str
    answer: int


def check_strict(item, solution):
    return Passed() if solution == item.answer else Failed(reason="wrong")
"""

CONFIG = """name = "diff-scale"
[data]
file = "data.jsonl"
schema = "diffschema:Item"
[prompt]
template = "What is {{{{ question }}}}?"
{models}
[adapter]
implementation = "last_number"
[checker]
implementation = "{checker}"
[run]
solver_workers = 16
stage_runs = false
output = "out"
[cli]
progress = false
"""

MODEL = """[[model]]
name = "m{index}"
provider = "mock"
args = {{ behaviour = "arithmetic", use_tools = false, accuracy_file = "{accuracy}" }}
"""


def write(folder: Path, items: int, models: int, checker: str) -> Path:
    (folder / "diffschema.py").write_text(SCHEMA)
    with (folder / "data.jsonl").open("w") as handle:
        for i in range(items):
            a, b = i + 2, 3 * i + 1
            handle.write(json.dumps({"id": f"i{i}", "question": f"{a} + {b}", "answer": a + b}) + "\n")
    blocks = "".join(MODEL.format(index=m, accuracy=folder / "accuracy.txt") for m in range(models))
    (folder / "config.toml").write_text(CONFIG.format(models=blocks, checker=checker))
    return folder / "config.toml"


def ape(*args: str, cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ape", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 3):
        raise SystemExit(f"ape {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, done


def timed_diff(folder: Path, env: dict[str, str]) -> tuple[list[float], str]:
    times, last = [], ""
    for _ in range(3):
        seconds, done = ape("diff", "out", "previous", "latest", cwd=folder, env=env)
        times.append(seconds)
        last = done.stdout
    return times, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--models", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ape-diff-scale-") as tmp:
        folder = Path(tmp)
        os.environ["APE_HOME"] = str(folder / "home")
        from ape import server

        server.start(port=4255)
        env = {**os.environ, "APE_SERVER_PORT": "4255", "PYTHONPATH": str(folder)}
        env.pop("PREFECT_API_URL", None)
        try:
            measure(folder, env, args.items, args.models)
        finally:
            server.stop()


def measure(folder: Path, env: dict[str, str], items: int, models: int) -> None:
    config = write(folder, items, models, "exact_match")
    for accuracy in ("0.9", "0.85"):
        (folder / "accuracy.txt").write_text(accuracy)
        seconds, _ = ape("run", str(config), "--new-run", cwd=folder, env=env)
        print(f"run at accuracy {accuracy}: {seconds:.1f} s")
    times, out = timed_diff(folder, env)
    flips = sum(line.count("pass->fail") for line in out.splitlines() if line.startswith("| i"))
    print(
        f"`ape diff` of {items} items x {models} models: {min(times):.2f} s best, {max(times):.2f} s "
        f"worst of 3 ({flips} flipped rows listed); goal < 3 s: {'met' if max(times) < 3 else 'NOT met'}"
    )
    write(folder, items, models, "diffschema:check_strict")
    seconds, _ = ape("run", str(config), "--new-run", cwd=folder, env=env)
    print(f"third run, checker changed: {seconds:.1f} s")
    times, out = timed_diff(folder, env)
    said = "re-scored" in out
    print(
        f"`ape diff` across the checker change ({items * models} saved answers re-scored: {said}): "
        f"{min(times):.2f} s best, {max(times):.2f} s worst of 3; goal < 3 s: "
        f"{'met' if max(times) < 3 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
