"""``ape schema``: the JSON Schema of config.toml, for editors that read a ``#:schema PATH`` line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ape.config_schema import schema_text
from ape.schemas.errors import ApeError

NAME = "schema"
HELP = "write the JSON Schema of config.toml, for editors that read a '#:schema PATH' line"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", type=Path, default=None, help="file to write (default: print it)")


def main(args: argparse.Namespace) -> int:
    return schema(args.output)


def schema(output: Path | None) -> int:
    """``ape schema``: the JSON Schema of config.toml (``ape.config_schema``), printed or written
    to ``output``; an editor that reads ``#:schema PATH`` then completes and checks the keys."""
    text = schema_text()
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ApeError(f"cannot write the schema: {exc.strerror or exc}", where=str(output)) from None
    print(f"wrote {output}; put '#:schema {output}' (or a path relative to the config) on config.toml's first line")
    return 0
