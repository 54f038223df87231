"""``ape init NAME [DIR]``: a runnable config for one benchmark of the catalogue.

Writes ``DIR/NAME.toml`` (DIR defaults to the current folder) from ``ape.catalogue``: its
model is one line to edit (an OpenAI-compatible endpoint's ``base_url`` and model name), its
data a Hugging Face dataset (the Hub, the local cache offline, or local files). An existing
file is never overwritten; an unknown NAME is one line listing close names (exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ape.cli.exit_codes import EXIT_OK
from ape.schemas.errors import shown_path

NAME = "init"
HELP = "write a runnable config for a benchmark of `ape benchmarks` (edit its model line, then `ape run`)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="the benchmark, as `ape benchmarks` names it (gsm8k, mmlu, arc_challenge, ...)")
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), help="folder to write NAME.toml into (default: .)")


def main(args: argparse.Namespace) -> int:
    return init(args.name, args.dir)


def init(name: str, folder: Path) -> int:
    """Write the config and say the two steps that follow."""
    from ape.catalogue import init_config

    written = init_config(name, folder)
    print(f"wrote {shown_path(written)}")
    print("  1. edit its `model = { ... }` line: your endpoint's base_url and model name")
    print(f"  2. ape run {shown_path(written)}")
    return EXIT_OK
