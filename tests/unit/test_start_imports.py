"""A run reaches its first model call without importing the report's libraries.

pandas (with numpy's and pyarrow's parts it pulls in) and SciPy take about half a second to
import on a 2-core machine; the report needs them once the models ran, the run's start does
not. Every module ``ape run`` imports before its first call is imported here, in a fresh
interpreter, and the heavy libraries must not be among them. A top-level ``import pandas``
added anywhere on that path fails this test with the module chain that brought it in.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.paths import REPO_ROOT

HEAVY = ("pandas", "scipy")

PROBE = """
import json, sys
from ape.cli import build_parser, command_module
build_parser("run")                       # `ape run` and `python -m ape config.toml`
import ape.launch                         # the config, the server, the preflight
import ape.flows.benchmark                # the flow and its evaluate subflows, live view
import ape.flows.evaluate
import ape.tasks.models.build             # the models and the checkers a session uses
import ape.tasks.checking.check
print(json.dumps({name: name in sys.modules for name in sys.argv[1:]}))
"""


def test_the_run_path_imports_no_report_library() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE, *HEAVY],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(done.stdout)
    assert loaded == dict.fromkeys(HEAVY, False), f"imported on the way to the first call: {_chains(done.stderr)}"


def test_the_whole_command_line_still_builds() -> None:
    """``ape --help`` and the docs' command reference import every command: all are listed."""
    from ape.cli import COMMANDS, build_parser

    parser = build_parser()
    listed = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert tuple(listed) == COMMANDS


def _chains(importtime: str) -> str:
    """The import chain of each heavy module, read from ``-X importtime``'s nested lines."""
    rows = []
    for line in importtime.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and "package" not in parts[2]:
            name = parts[2].rstrip()
            rows.append((len(name) - len(name.lstrip()), name.strip()))
    found = []
    for index, (depth, name) in enumerate(rows):
        if name in HEAVY:
            chain, level = [name], depth
            for outer_depth, outer in rows[index + 1 :]:
                if outer_depth < level:
                    chain.append(outer)
                    level = outer_depth
            found.append(" <- ".join(chain))
    return "; ".join(found) or "(no chain found)"
