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
