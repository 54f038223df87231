"""What running the candidate in a process of its own costs code_exec: per call, per HumanEval run.

    python benchmarks/code_exec_process.py [--sandbox bwrap] [--calls 2000] [--limit N] [--old REV]

Runs each measurement with the harness of git revision ``--old`` (the tests and the
candidate in one interpreter, behind the returned-value guard) and with this checkout's
(the tests in the trusted process, the candidate in a forked one, plain data across a
pipe), back to back on the same machine, and prints the ratios:

- **per call**: one check whose test calls ``f(xs)`` (a ten-number list) ``--calls`` times
  minus one that calls it once, divided by the calls: the cost of one call of the tests
  into the candidate's code (``duration_s`` is the harness's own time, from holding the job
  to its last record);
- **per HumanEval run**: the 164 canonical solutions and 164 ``return None`` stubs through
  :func:`run_code`, one check after another (expected: 164/164 and 0/164 with either
  harness), their wall time and the median ``duration_s`` of a canonical check.

Compare figures of one run: the machine's load moves both.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ape.tasks.checking.code import code_exec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from code_exec_guard import problems  # noqa: E402 - the benchmarks folder is not a package

REPO = Path(__file__).resolve().parents[1]
CALLER = "def f(xs):\n    return sorted(xs)\n"


def harness_at(revision: str) -> str:
    """The sandboxed program's text at ``revision`` (before the wire format, harness.py alone)."""
    show = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:tasks/checking/code/harness.py"],
        capture_output=True,
        text=True,
        check=True,
    )
    return show.stdout


def use(source: str) -> None:
    """Make run_code start interpreters running ``source`` (the warm pools are emptied first)."""
    code_exec.close_pools()
    code_exec.HARNESS_SOURCE = source


def per_call(sandbox: str, calls: int, rounds: int = 5) -> float:
    """Seconds of harness time per call of the tests into the candidate's function (median of rounds)."""
    many = f"xs = [5, 3, 9, 1, 7, 2, 8, 6, 4, 0]\nfor _ in range({calls}):\n    f(xs)\nassert f(xs) == sorted(xs)\n"
    once = "xs = [5, 3, 9, 1, 7, 2, 8, 6, 4, 0]\nassert f(xs) == sorted(xs)\n"
    code_exec.run_code(CALLER, once, sandbox=sandbox)  # warm the pool
    costs = []
    for _ in range(rounds):
        long = code_exec.run_code(CALLER, many, timeout_s=60.0, sandbox=sandbox)
        short = code_exec.run_code(CALLER, once, timeout_s=60.0, sandbox=sandbox)
        assert long.score == short.score == 1.0, (long, short)
        costs.append((long.duration_s - short.duration_s) / calls)
    return statistics.median(costs)


def humaneval(sandbox: str, limit: int | None) -> tuple[int, int, int, float, float]:
    """(problems, canonical passed, stubs passed, wall seconds, median canonical duration_s)."""
    rows = problems(limit)
    code_exec.run_code(CALLER, "assert f([2, 1]) == [1, 2]\n", sandbox=sandbox)  # warm the pool
    passed = stubs = 0
    durations = []
    began = time.perf_counter()
    for _, canonical, stub, tests in rows:
        result = code_exec.run_code(canonical, tests, timeout_s=10.0, sandbox=sandbox)
        durations.append(result.duration_s)
        passed += result.score == 1.0
        stubs += code_exec.run_code(stub, tests, timeout_s=10.0, sandbox=sandbox).score != 0.0
    return len(rows), passed, stubs, time.perf_counter() - began, statistics.median(durations)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="bwrap", choices=["none", "auto", "bwrap", "unshare"])
    parser.add_argument("--calls", type=int, default=2000, help="calls in the long check of the per-call figure")
    parser.add_argument("--limit", type=int, default=None, help="only the first N HumanEval problems")
    parser.add_argument("--old", default="main", help="the git revision of the one-process harness")
    args = parser.parse_args(argv)
    harnesses = {
        f"one process ({args.old})": harness_at(args.old),
        "two processes (this checkout)": code_exec.HARNESS_SOURCE,
    }
    figures = {}
    ok = True
    for name, source in harnesses.items():
        use(source)
        call = per_call(args.sandbox, args.calls)
        count, passed, stubs, wall, median = humaneval(args.sandbox, args.limit)
        figures[name] = (call, wall, median)
        ok = ok and passed == count and stubs == 0
        print(
            f"{name}, sandbox={args.sandbox}: {call * 1e6:.1f} us per call; HumanEval canonical {passed}/{count}, "
            f"stubs {stubs}/{count}, {wall:.1f} s for {2 * count} checks, median canonical duration_s "
            f"{median * 1000:.2f} ms"
        )
    code_exec.close_pools()
    (old_call, old_wall, old_median), (new_call, new_wall, new_median) = figures.values()
    print(
        f"ratios new/old: per call {new_call / old_call:.1f}x, HumanEval run wall {new_wall / old_wall:.2f}x, "
        f"median canonical duration_s {new_median / old_median:.2f}x"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
