"""code_exec against forged verdicts: code that runs when it chooses cannot report a pass.

Each forgery (tests/helpers/attacks.py, FORGERIES) has a wrong ``add``, so its honest
score is 0. It waits for a signal handler (raised from the function under test, a timer,
a thread or a finalizer), walks up the interrupted frames to the code that reports the
results, and reports every test passed, writes verdict lines to the result pipe and to
fd 1, or exits right after; one returns an object whose ``__eq__`` always says True. When
the tests ran in the candidate's interpreter, all but the last scored 1.0 in bwrap; with
the tests in a process of their own every one scores 0, in every sandbox this machine has.
"""

from __future__ import annotations

import sys

import pytest

from ape.tasks.checking.code.code_exec import run_code
from tests.helpers.attacks import FORGERIES, FORGERY_TESTS
from tests.helpers.sandbox_kinds import KINDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandboxes need Linux")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_verdict_scores_zero(name: str, kind: str) -> None:
    result = run_code(FORGERIES[name], FORGERY_TESTS, timeout_s=10.0, memory_mb=256, sandbox=kind)
    assert result.sandbox == kind
    assert (result.score, result.passed, result.total) == (0.0, 0, 2), result


def test_the_tests_never_run_in_the_candidates_process() -> None:
    """The structure itself: the function the tests call answers from another process."""
    code = "import os\n\ndef where():\n    return os.getpid()\n"
    result = run_code(code, "import os\nassert where() != os.getpid()\n", timeout_s=10.0, sandbox="none")
    assert result.score == 1.0, result


PROBE = """
import os, signal

def probe():
    parent = os.getppid()
    found = []
    opened = []  # its descriptors may be listed, not opened (the result pipe among them)
    for name in os.listdir("/proc/%d/fd" % parent):
        try:
            os.close(os.open("/proc/%d/fd/%s" % (parent, name), os.O_WRONLY))
            opened.append(name)
        except OSError as exc:
            if not isinstance(exc, PermissionError):
                opened.append(type(exc).__name__)
    found.append(opened or "PermissionError")
    for path in ("/proc/%d/mem" % parent, "/proc/%d/environ" % parent):
        try:
            with open(path, "rb") as handle:
                handle.read(1)
            found.append("read")
        except OSError as exc:
            found.append(type(exc).__name__)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        os.kill(parent, signum)
    return [parent, found]
"""


@pytest.mark.parametrize("kind", KINDS)
def test_the_candidate_can_neither_read_nor_kill_the_tests_process(kind: str) -> None:
    """The tests' process is the sandbox's init (signals from inside do not reach it) and is
    not dumpable (its descriptors and memory are closed to the candidate's process)."""
    tests = "import os\nassert os.getpid() == 1\nassert probe()[0] == 1\nassert os.getpid() == 1\n"
    result = run_code(PROBE, tests + "assert probe()[1] == ['PermissionError'] * 3\n", timeout_s=10.0, sandbox=kind)
    assert (result.passed, result.total) == (4, 4), result
