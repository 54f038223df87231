"""code_exec: candidate code runs in a separate, limited process; the score is the share passed."""

from __future__ import annotations

import os
import sys
import time

import pytest

from ape.schemas.check import Failed, Passed
from ape.tasks.checking.builtin import builtin_checker
from ape.tasks.checking.code.code_exec import run_code
from ape.tasks.checking.metrics import code_exec

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process limits need POSIX")

FAST = {"timeout_s": 1.5, "memory_mb": 256}
ADD = "def add(a, b):\n    return a + b\n"


def test_passing_code_scores_one():
    result = run_code(ADD, "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n", **FAST)
    assert (result.score, result.passed, result.total) == (1.0, 2, 2)
    assert result.error is None and not result.timed_out


def test_a_finished_run_saves_its_exit_code_whatever_the_machine_s_pace():
    # read right after the harness said it was done, the code was 0 or None by a race
    codes = {run_code(ADD, "assert add(1, 2) == 3\n", **FAST).exit_code for _ in range(5)}
    assert codes == {0}


def test_score_is_the_share_of_tests_passed():
    tests = "assert add(1, 2) == 3\nassert add(2, 2) == 5\nassert add(0, 0) == 0\nassert add(1, 1) == 3\n"
    result = run_code(ADD, tests, **FAST)
    assert (result.passed, result.total) == (2, 4)
    assert result.score == pytest.approx(0.5)
    assert len(result.failures) == 2 and "AssertionError" in result.failures[0]
    assert code_exec(ADD, tests, **FAST) == pytest.approx(0.5)


def test_setup_statements_run_between_tests():
    tests = "data = [1, 2, 3]\nassert add(*data[:2]) == 3\ndata.append(4)\nassert len(data) == 4\n"
    assert run_code(ADD, tests, **FAST).score == 1.0


def test_tests_without_asserts_are_one_test():
    tests = "def check(candidate):\n    assert candidate(2, 3) == 5\n\ncheck(add)\n"
    result = run_code(ADD, tests, **FAST)
    assert (result.score, result.total) == (1.0, 1)
    wrong = run_code("def add(a, b):\n    return a - b\n", tests, **FAST)
    assert (wrong.score, wrong.total, wrong.passed) == (0.0, 1, 0)


def test_failing_code_scores_zero():
    result = run_code("def add(a, b):\n    return a * b\n", "assert add(2, 3) == 5\n", **FAST)
    assert result.score == 0.0 and result.failures


def test_crashing_code_scores_zero_with_the_reason():
    result = run_code("raise RuntimeError('boom')\n", "assert True\n", **FAST)
    assert result.score == 0.0
    assert "RuntimeError: boom" in result.error
    syntax = run_code("def add(a, b)\n    return a\n", "assert True\n", **FAST)
    assert syntax.score == 0.0 and "SyntaxError" in syntax.error


def test_exceptions_inside_a_test_fail_only_that_test():
    code = "def div(a, b):\n    return a / b\n"
    result = run_code(code, "assert div(4, 2) == 2\nassert div(1, 0) == 0\n", **FAST)
    assert (result.passed, result.total) == (1, 2)
    assert "ZeroDivisionError" in result.failures[0]


def test_infinite_loop_is_killed_at_the_time_limit_keeping_finished_tests():
    code = "def f(x):\n    while x:\n        pass\n    return 1\n"
    started = time.monotonic()
    result = run_code(code, "assert f(0) == 1\nassert f(1) == 1\n", timeout_s=1.0, memory_mb=256)
    elapsed = time.monotonic() - started
    assert result.timed_out and "time limit" in result.error
    assert (result.passed, result.total) == (1, 2)
    assert result.score == pytest.approx(0.5)
    # a hang guard, not a measurement: the loop was ended by the 1 s limit, not left running
    # (a loaded machine may take seconds to start and stop the sandbox)
    assert elapsed < 60.0


def test_memory_hungry_code_hits_the_memory_limit():
    hungry = "def grab():\n    return bytearray(2 * 1024 ** 3)\n"
    result = run_code(hungry, "assert len(grab()) > 0\n", **FAST)
    assert result.score == 0.0
    assert "MemoryError" in result.failures[0]
    at_import = run_code("blob = [0] * (10 ** 9)\n", "assert True\n", **FAST)
    assert at_import.score == 0.0 and "MemoryError" in at_import.error


def test_exit_calls_do_not_fake_a_pass():
    result = run_code("import sys\ndef f():\n    sys.exit(0)\n", "assert f() is None\n", **FAST)
    assert result.score == 0.0 and "SystemExit" in result.failures[0]
    hard = run_code("import os\ndef f():\n    os._exit(0)\n", "assert 1\nf()\nassert 2\n", **FAST)
    assert (hard.passed, hard.total) == (1, 2) and "ended" in hard.error


def test_child_sees_a_fresh_folder_and_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("APE_TEST_SECRET", "hunter2")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.jsonl").write_text("{}\n")
    code = "import os\nhere = sorted(os.listdir('.'))\nenv = dict(os.environ)\n"
    tests = (
        "assert 'APE_TEST_SECRET' not in env\n"
        "assert 'results.jsonl' not in here\n"
        f"assert os.getcwd() != {str(tmp_path)!r}\n"
        "open('scratch.txt', 'w').write('x')\n"
    )
    result = run_code(code, tests, **FAST)
    assert result.score == 1.0, result
    assert not (tmp_path / "scratch.txt").exists()
    assert os.environ["APE_TEST_SECRET"] == "hunter2"


def test_output_is_captured_not_mixed_into_results():
    result = run_code("print('hello from the candidate')\n", "assert True\n", **FAST)
    assert result.score == 1.0 and "hello from the candidate" in result.stdout_tail


def test_unparsable_tests_are_reported():
    result = run_code(ADD, "assert (\n", **FAST)
    assert result.score == 0.0 and "do not parse" in result.error


def test_bad_limits_are_rejected():
    with pytest.raises(ValueError, match="timeout_s"):
        run_code(ADD, "assert True", timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        run_code(ADD, "assert True", memory_mb=0)


def test_code_exec_checker_reads_tests_and_reports_details():
    checker = builtin_checker("code_exec", {"tests_field": "checks", "timeout_s": 1.5, "memory_mb": 256})
    assert checker.metric == "code_exec"
    item = {"checks": "assert add(1, 1) == 2\nassert add(1, 2) == 3\n"}
    passed = checker(item, ADD)
    assert isinstance(passed, Passed) and passed.score == 1.0
    assert passed.metadata["passed"] == 2 and passed.metadata["total"] == 2
    failed = checker(item, "def add(a, b):\n    return 2\n")
    assert isinstance(failed, Failed) and failed.score == pytest.approx(0.5)
    assert failed.metadata["failures"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process state from /proc")
def test_an_ended_sandbox_keeps_its_process_id_until_it_is_killed():
    """Checking whether a sandbox ended must not reap it: a reaped id can be reused by the next
    sandbox at once, and killing the old one's process group would then kill the new one."""
    import subprocess

    from ape.tasks.checking.code.code_exec import peek_exit

    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert peek_exit(process, timeout=10) == 3
    assert process.returncode is None  # not reaped: the id is still reserved (a zombie)
    with open(f"/proc/{process.pid}/stat") as stat:
        assert stat.read().split(") ")[1].startswith("Z")
    assert process.wait() == 3
