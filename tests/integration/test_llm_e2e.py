"""A real LLM through the real command line: SmolLM2-135M served by APE itself.

The test runs ``examples/llm`` as shipped (``provider = "llama-cpp"``: APE starts
llama-cpp-python's server on a free port and stops it at the end) with
``python -m ape run`` as a subprocess against the test Prefect server. It then
reads what a user would read: results.jsonl, sessions.jsonl, report.json and the
server's log in the output folder.
The cheap tests at the top keep the example valid on machines without the
``llm`` extra.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.llm_server import llm_missing, smollm2_missing
from tests.helpers.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "llm"
OK_OUTCOMES = {"SOLVED", "PARSING_FAILED", "GAVE_UP"}


def ape(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess (PREFECT_API_URL comes from the environment)."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.run(
        [sys.executable, "-m", "ape", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def copy_example(target: Path) -> Path:
    """The example, unchanged, in ``target``; returns its config."""
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target / "config.toml"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def example_ids() -> list[str]:
    return [row["id"] for row in read_jsonl(EXAMPLE / "data.jsonl")]


# -- the example without a model -----------------------------------------------------------------


@pytest.mark.skipif(smollm2_missing() is not None, reason=smollm2_missing() or "")
def test_example_config_validates() -> None:
    from ape.cli import main

    assert main(["validate", str(EXAMPLE / "config.toml")]) == 0


def test_example_config_names_the_managed_local_model() -> None:
    from ape.config import load_config

    config = load_config(EXAMPLE / "config.toml")
    (model,) = config.model
    assert model.provider == "llama-cpp" and model.model == "smollm2-135m"
    assert model.base_url is None  # APE fills it in when it has started the server
    assert model.logprobs is True  # the example shows calibration, so it asks for them
    assert model.temperature == 0.0 and model.max_tokens is not None and model.max_tokens <= 64


@pytest.mark.parametrize(
    ("answer", "passed"),
    [
        ("The capital of France is Paris.", True),
        ("PARIS", True),
        ("Parisian cafes are nice.", False),
        ("The capital of France is Lyon.", False),
        ("", False),
    ],
)
def test_example_checker_accepts_phrasing_not_other_words(answer: str, passed: bool) -> None:
    from ape import Passed
    from ape.tasks.plugins.loader import load_object

    Question = load_object("easy_qa:Question", base_dir=EXAMPLE)
    mentions_answer = load_object("easy_qa:mentions_answer", base_dir=EXAMPLE)

    item = Question(id="q", question="What is the capital of France?", answers=["Paris"])
    assert isinstance(mentions_answer(item, answer), Passed) is passed


# -- the real model, end to end ------------------------------------------------------------------


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.skipif(llm_missing() is not None, reason=llm_missing() or "")
def test_real_model_through_ape_run(tmp_path: Path, prefect_server: str) -> None:
    import psutil

    config = copy_example(tmp_path / "bench")
    out = tmp_path / "out"
    proc = ape("run", str(config), "--no-server", "--no-progress", "--output", str(out))
    assert proc.returncode == 0, f"ape run failed:\n{proc.stdout}\n{proc.stderr}"
    assert "smollm2-135m" in proc.stdout  # the leaderboard table
    # APE started the server, logged it into the output folder, and stopped it
    log = (out / "llama-server.log").read_text(encoding="utf-8", errors="replace")
    assert "llama_cpp.server" in log and log.count("POST /v1/chat/completions") == len(example_ids())
    port = re.search(r"--port (\d+)", log)
    assert port, log[:500]
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "llama_cpp.server" in " ".join(p.info["cmdline"] or [])
        and f"--port {port.group(1)} " in " ".join(p.info["cmdline"] or []) + " "
    ]
    assert not left, f"server left running: {left}"

    # every item exactly once, none errored
    batches = read_jsonl(out / "results.jsonl")
    assert sorted(b["item_id"] for b in batches) == sorted(example_ids())
    sessions = [s for b in batches for s in b["sessions"]]
    assert len(sessions) == len(batches)
    assert {s["outcome"] for s in sessions} <= OK_OUTCOMES
    assert all(s["model_id"] == "smollm2-135m" and not s["cached"] for s in sessions)
    # confidence from the answer's token log-probabilities: exp(-nll / count)
    for s in sessions:
        assert s["token_count"] and s["token_count"] > 0, s
        assert s["token_nll"] is not None and s["token_nll"] > 0, s
        assert 0.0 < s["confidence"] < 1.0, s
        assert s["confidence"] == pytest.approx(math.exp(-s["token_nll"] / s["token_count"]), rel=1e-6)
        assert s["input_tokens"] > 0 and s["output_tokens"] > 0
    # a model this small still knows the capital of France
    assert any(s["correct"] for s in sessions)

    # transcripts carry the real token usage of each model response
    transcripts = read_jsonl(out / "sessions.jsonl")
    assert sorted(t["item_id"] for t in transcripts) == sorted(example_ids())
    for t in transcripts:
        responses = [e for e in t["entries"] if e["kind"] == "MODEL_RESPONSE"]
        assert responses, t
        usage = responses[-1]["data"]["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert responses[-1]["data"]["token_count"] > 0
        assert responses[-1]["content"].strip()
        assert t["entries"][-1]["kind"] == "SESSION_END"

    # the report: one model, calibration computed from those confidences
    envelope = json.loads((out / "report.json").read_text())
    assert envelope["error"] is None
    (row,) = envelope["leaderboard"]
    assert row["model_id"] == "smollm2-135m" and row["n_items"] == len(batches)
    assert row["outcomes"]["ERROR"] == 0
    calibration = envelope["calibration"]["smollm2-135m"]
    assert calibration["n"] == len(sessions) and calibration["missing"] == 0
    assert 0.0 <= calibration["ece"] <= 1.0
    brier = sum((s["confidence"] - s["correct"]) ** 2 for s in sessions) / len(sessions)
    assert calibration["brier"] == pytest.approx(brier)
    assert calibration["populated_bins"] >= 1
