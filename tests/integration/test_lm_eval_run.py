"""``[task] lm_eval = "gsm8k"`` through the real command line, on local GSM8K-shaped files:

- a run killed mid-way (SIGKILL) and started again resumes: every document saved once,
  none asked again, and the report holds the harness's own metrics;
- a run whose endpoint fails on one document ends with exit code 1, and ``ape retry``
  redoes that document alone once the endpoint recovers; the harness's numbers follow;
- an unknown task name is one line and exit code 2, with no model call.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_openai import LoopbackEndpoint, Reply, Request, completion, error_body
from tests.helpers.lm_eval_data import needs_lm_eval, offline, write_gsm8k
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import read_results

needs_lm_eval()
pytestmark = pytest.mark.slow

TASK = """name = "gsm8k-local"

[task]
lm_eval = "gsm8k"
num_fewshot = 2
data_files = {{ train = "gsm8k/train.jsonl", test = "gsm8k/test.jsonl" }}

{model}
[run]
output = "out"
"""
LAST_QUESTION = re.compile(r"Ann has (\d+) boxes[^\n]*\nAnswer:$")


def _config(folder: Path, model: str, test: int) -> Path:
    write_gsm8k(folder, test=test)
    path = folder / "config.toml"
    path.write_text(TASK.format(model=model), encoding="utf-8")
    return path


def _env(prefect_server: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(
        os.environ, PREFECT_API_URL=prefect_server, PYTHONPATH=path, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1"
    )


def _saved(out: Path) -> dict[str, dict[str, Any]]:
    rows = read_results(out / "results.jsonl") if (out / "results.jsonl").exists() else []
    ids = [row["item_id"] for row in rows]
    assert len(ids) == len(set(ids)), f"an item was saved twice: {sorted(ids)}"
    return {row["item_id"]: row for row in rows}


def _harness(out: Path) -> dict[str, Any]:
    summary = json.loads((out / "report.json").read_text())["summary"]
    (scores,) = summary["lm_eval"]["models"].values()
    return scores


def test_a_killed_run_resumes(
    tmp_path: Path,
    prefect_server: str,
    kill_at_end: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ape.cli import main

    log = tmp_path / "calls.log"
    model = (
        '[model]\nname = "oracle"\nprovider = "mock"\nmodel = "oracle"\n'
        f'args = {{ field = "target", latency_s = 0.4, call_log = "{log}" }}\n'
    )
    config = _config(tmp_path, model, test=10)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--workers", "1", "--no-progress"]
    first = kill_at_end(
        subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=_env(prefect_server),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )
    deadline = time.monotonic() + 240
    while len(_saved(out)) < 3:
        assert first.poll() is None, first.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the run saved too little in time"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    before = set(_saved(out))
    assert 3 <= len(before) < 10
    calls_before = len(log.read_text().splitlines())

    offline(monkeypatch)  # started again in this process (the harness's task index read once for the module)
    capsys.readouterr()
    assert main(command[3:]) == 0
    stdout = capsys.readouterr().out
    saved = _saved(out)
    assert sorted(saved) == sorted(f"gsm8k/{i}" for i in range(10))
    new_calls = len(log.read_text().splitlines()) - calls_before
    assert new_calls <= 10 - len(before)  # what was saved before the kill was not asked again
    assert all(row["sessions"][0]["correct"] for row in saved.values())
    scores = _harness(out)
    assert scores["missing"] == 0
    assert scores["results"]["gsm8k"]["exact_match,strict-match"] == 1.0
    assert "## lm-evaluation-harness: `gsm8k`" in stdout


class Gsm8kEndpoint(LoopbackEndpoint):
    """Answers the last question of the prompt right, in GSM8K's format; the document about
    ``broken`` boxes gets a 500 until ``recovered``."""

    def __init__(self, broken: int) -> None:
        self.asked: Counter[int] = Counter()
        self.broken = broken
        self.recovered = False
        super().__init__(self.answer)

    def answer(self, request: Request) -> Reply:
        users = [m.get("content") for m in request.body.get("messages", []) if m.get("role") == "user"]
        found = LAST_QUESTION.search(str(users[-1])) if users else None
        if found is None:
            return 400, error_body("no question at the end of the prompt")
        boxes = int(found.group(1))
        with self.lock:
            self.asked[boxes] += 1
            if boxes == self.broken and not self.recovered:
                return 500, error_body("the backend is down")
        return 200, completion(f"{boxes} * 3 + 1 = {boxes * 3 + 1}\n#### {boxes * 3 + 1}\n\nQuestion: more?")


@pytest.fixture
def endpoint() -> Iterator[Gsm8kEndpoint]:
    server = Gsm8kEndpoint(broken=2)  # the document gsm8k/1 (Ann has 2 boxes)
    yield server
    server.close()


def test_a_failed_document_is_retried(
    tmp_path: Path, prefect_server: str, endpoint: Gsm8kEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langchain_openai", reason="the retry test needs the 'openai' extra")
    from ape.cli import main

    model = (
        '[model]\nname = "endpoint"\nprovider = "openai"\nmodel = "fake"\n'
        f'base_url = "{endpoint.base_url}"\nmax_retries = 0\ntimeout_s = 10\n'
    )
    config = _config(tmp_path, model, test=4)
    out = tmp_path / "out"
    offline(monkeypatch)
    assert main(["run", str(config), "--no-server", "--workers", "1", "--no-progress"]) == 1
    saved = _saved(out)
    assert saved["gsm8k/1"]["sessions"][0]["outcome"] == "ERROR"
    assert all(saved[f"gsm8k/{i}"]["sessions"][0]["correct"] for i in (0, 2, 3))
    first = _harness(out)
    assert first["missing"] == 1 and first["results"]["gsm8k"]["exact_match,strict-match"] == 0.75

    endpoint.recovered = True
    assert main(["retry", str(out), "--no-server", "--no-progress"]) == 0
    saved = _saved(out)
    assert all(row["sessions"][0]["correct"] for row in saved.values())
    assert endpoint.asked == {1: 1, 2: 2, 3: 1, 4: 1}  # only the failed document was asked again
    second = _harness(out)
    assert second["missing"] == 0 and second["results"]["gsm8k"]["exact_match,strict-match"] == 1.0


def test_an_unknown_task_stops_before_any_model_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ape.cli import main

    log = tmp_path / "calls.log"
    model = f'[model]\nprovider = "mock"\nmodel = "oracle"\nargs = {{ field = "target", call_log = "{log}" }}\n'
    config = tmp_path / "config.toml"
    config.write_text(f'[task]\nlm_eval = "gsm8kk"\n{model}', encoding="utf-8")
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown lm-evaluation-harness task 'gsm8kk'" in err[0] and "gsm8k" in err[0]
    assert not log.exists()
