"""The cost of compiling a large lm-evaluation-harness group into APE items, beside the
harness building the same requests.

Generated data in the shape of MMLU (57 subjects, 14,042 test questions and five dev
questions each, a local dataset folder whose README names one configuration per subject,
as the Hub's copy of MMLU does) is built twice, each in a fresh Python process, in turn:

- ``harness``: lm-evaluation-harness alone: its task index, the group ``mmlu_generative``
  loaded with ``dataset_path`` overridden, and ``build_all_requests`` on every subtask
  (what ``lm_eval.evaluator.evaluate`` does before its first model call);
- ``ape``: ``load_config`` of a config with ``[task] lm_eval = "mmlu_generative"``, which does
  the same through APE and writes the items file (``OUTPUT/lm_eval/...jsonl``), then the
  data scan ``ape validate`` runs.

Each process starts with an empty cache of the ``datasets`` library (both read the data
files, neither a cache), and reports its wall time and its peak memory (ru_maxrss); the script prints both
and APE's ratios to the harness (medians of ``--repeat`` rounds). No network, no model.

    python benchmarks/lm_eval_build.py               # 14,042 questions, 57 subjects
    python benchmarks/lm_eval_build.py --questions 2000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def subjects() -> list[str]:
    """MMLU's subject configurations, read from the harness's own generative task files."""
    import yaml
    from lm_eval import tasks

    folder = Path(tasks.__file__).parent / "mmlu" / "generative"
    names = []
    for path in sorted(folder.glob("mmlu_*.yaml")):
        text = path.read_text(encoding="utf-8")
        names.append(yaml.safe_load(text)["dataset_name"])
    return names


def write_dataset(folder: Path, questions: int) -> int:
    """A local MMLU-shaped dataset folder: per subject test.jsonl and dev.jsonl, and a README
    whose configs name them; returns the number of test questions written."""
    names = subjects()
    lines = ["---", "configs:"]
    written = 0
    for index, name in enumerate(names):
        count = questions // len(names) + (1 if index < questions % len(names) else 0)
        for split, rows in (("test", count), ("dev", 5)):
            path = folder / name / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8") as out:
                for i in range(rows):
                    row = {
                        "question": f"{name} question {i}: which value satisfies condition {i % 17}?",
                        "subject": name,
                        "choices": [f"value {i}", f"value {i + 1}", f"value {2 * i}", "none of these"],
                        "answer": i % 4,
                    }
                    out.write(json.dumps(row) + "\n")
        written += count
        lines += [f"- config_name: {name}", "  data_files:"]
        lines += [f"  - split: {s}\n    path: {name}/{s}.jsonl" for s in ("test", "dev")]
    lines.append("---")
    (folder / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written


def child_harness(data: Path) -> dict[str, float]:
    from lm_eval.evaluator_utils import get_sample_size
    from lm_eval.tasks import TaskManager

    manager = TaskManager()
    entry = manager.task_index["mmlu_generative"]
    built = manager._factory.build(entry, overrides={"dataset_path": str(data)}, registry=manager._index)
    loaded = manager.load([built])
    requests = 0
    for task in loaded["tasks"].values():
        task.set_fewshot_seed(seed=1234)
        task.build_all_requests(limit=get_sample_size(task, None))
        requests += len(task.instances)
    return {"requests": requests}


def child_ape(data: Path, work: Path) -> dict[str, float]:
    from ape.config import load_config
    from ape.schemas.lm_eval import LmEvalItem
    from ape.tasks.storage.data import DataProvider

    config = work / "config.toml"
    config.write_text(
        f'[task]\nlm_eval = "mmlu_generative"\ndataset_path = "{data}"\n'
        '[model]\nprovider = "mock"\nmodel = "oracle"\nargs = { field = "target" }\n'
        f'[run]\noutput = "{work / "out"}"\n',
        encoding="utf-8",
    )
    loaded = load_config(config)
    scanned = DataProvider.for_config(loaded.data, LmEvalItem).scan()
    return {"requests": len(scanned), "file_mb": loaded.data.file.stat().st_size / 1e6}


def child(kind: str, data: Path, work: Path) -> None:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    found = child_harness(data) if kind == "harness" else child_ape(data, work)
    found["seconds"] = time.perf_counter() - start
    found["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(found))


def measure(kind: str, data: Path, work: Path) -> dict[str, float]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # a fresh cache of the datasets library per process: both read the data files, none a cache
    env = dict(os.environ, PYTHONPATH=path, HF_DATASETS_CACHE=str(work / "hf-datasets-cache"))
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--data", str(data), "--work", str(work)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{kind} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=14_042)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", choices=["harness", "ape"])
    parser.add_argument("--data", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.data, args.work)
        return
    with tempfile.TemporaryDirectory(prefix="ape-lm-eval-build-") as tmp:
        data = Path(tmp) / "mmlu"
        written = write_dataset(data, args.questions)
        print(f"generated MMLU-shaped data: {len(subjects())} subjects, {written:,} test questions")
        rounds: dict[str, list[dict[str, float]]] = {"harness": [], "ape": []}
        for number in range(args.repeat):
            for kind in ("harness", "ape"):
                work = Path(tmp) / f"{kind}-{number}"
                work.mkdir()
                rounds[kind].append(found := measure(kind, data, work))
                print(f"round {number + 1} {kind}: {json.dumps({k: round(v, 2) for k, v in found.items()})}")
        load = os.getloadavg()[0]
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("seconds", "peak_mb")} for k, v in rounds.items()}
    assert rounds["ape"][0]["requests"] == rounds["harness"][0]["requests"] == written
    print(f"\n| build of {written:,} requests | wall s (median) | peak MB (median) |\n|---|---|---|")
    for kind in ("harness", "ape"):
        print(f"| {kind} | {med[kind]['seconds']:.1f} | {med[kind]['peak_mb']:.0f} |")
    print(
        f"\nAPE / harness: wall {med['ape']['seconds'] / med['harness']['seconds']:.2f}x, "
        f"peak memory {med['ape']['peak_mb'] / med['harness']['peak_mb']:.2f}x "
        f"(items file {rounds['ape'][0]['file_mb']:.1f} MB; load average {load:.1f})"
    )


if __name__ == "__main__":
    main()
