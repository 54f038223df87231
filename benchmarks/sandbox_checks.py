"""Time per code_exec check of a trivial candidate, in each sandbox this machine has.

    python benchmarks/sandbox_checks.py [--checks 200] [--kinds bwrap,unshare,none]

Runs ``--checks`` checks one after another through :func:`run_code` (its warm pool starts
the next interpreter while a check runs, as in a real run) and prints the wall time per
check for each kind. Then it starts ``--starts`` sandboxes that run ``true`` and prints
the wall and CPU time (the launcher and everything it started, waited for) of one start:
the cost of the sandbox's mounts alone, which wall time on a busy machine hides. The
figures of one invocation compare; seconds from different machines or loads do not.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import time

from ape.tasks.checking.code import sandbox as sandboxes
from ape.tasks.checking.code.code_exec import close_pools, run_code

CODE = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\n"


def per_check(kind: str, checks: int) -> float:
    """Seconds of wall time per check, after two checks that warm the pool."""
    for _ in range(2):
        run_code(CODE, TESTS, sandbox=kind)
    began = time.perf_counter()
    for _ in range(checks):
        result = run_code(CODE, TESTS, sandbox=kind)
        if result.score != 1.0:
            raise SystemExit(f"{kind}: the trivial candidate scored {result.score}: {result}")
    took = (time.perf_counter() - began) / checks
    close_pools()
    return took


def per_start(kind: str, starts: int) -> tuple[float, float]:
    """Median wall seconds and mean CPU seconds of starting a ``kind`` sandbox that runs ``true``."""
    argv = [*sandboxes.prefix(kind), "true"]  # type: ignore[arg-type]
    walls = []
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(starts):
        began = time.perf_counter()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        walls.append(time.perf_counter() - began)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return statistics.median(walls), cpu / starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--kinds", default="bwrap,unshare,none")
    parser.add_argument("--starts", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="repeat each kind, interleaved")
    args = parser.parse_args()
    kinds = []
    for kind in args.kinds.split(","):
        try:
            sandboxes.prefix(kind)  # type: ignore[arg-type]
            kinds.append(kind)
        except sandboxes.SandboxUnavailable as exc:
            print(f"{kind}: not available here ({exc})")
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds if args.checks else 0):
        for kind in kinds:
            times[kind].append(per_check(kind, args.checks))
    for kind, values in times.items() if args.checks else ():
        shown = ", ".join(f"{value * 1000:.1f}" for value in values)
        print(f"{kind}: {statistics.median(values) * 1000:.1f} ms per check (median of {len(values)}: {shown})")
    for kind in kinds:
        if kind != "none" and args.starts:
            wall, cpu = per_start(kind, args.starts)
            print(f"{kind} start: {wall * 1000:.1f} ms wall (median), {cpu * 1000:.1f} ms CPU (mean of {args.starts})")


if __name__ == "__main__":
    main()
