"""``ape status RUN``: how far a run has got, per model; while it goes and after it ended.

RUN is an output folder: the ``[run] output`` folder of a run by hand, a run folder under
its ``runs/`` (a scheduled or served run; the folder itself shows its newest run), or one
model's folder. The numbers are the live view's (:mod:`ape.flows.live.view`), read from each
model's ``live.json`` (validated: :mod:`ape.tasks.storage.live_files`): the same the flow
run's artifacts show in the Prefect UI. Reading a folder needs no server, so it works with
``--no-server`` runs, and after the server is gone. RUN may also be a flow run's id
(``ape ctl`` takes one) where the configured server knows that run and its config's output
folder is on this machine (:mod:`ape.cli.flow_run_output`).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from ape.schemas.errors import ApeError
from ape.tasks.common.inert import terminal_safe

NAME = "status"
HELP = "how far a run has got, per model (items, pass rate, errors, pace, time left): while it goes and after"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run",
        type=Path,
        metavar="RUN",
        help="the run's output folder ([run] output), a run folder under its runs/, or one model's folder",
    )
    p.add_argument("--json", action="store_true", help="print the models' live.json, validated, as one JSON list")


def main(args: argparse.Namespace) -> int:
    return status(args.run, as_json=args.json)


def status(run: Path, *, as_json: bool = False) -> int:
    from ape.tasks.report.live import describe
    from ape.tasks.storage.live_files import find_live, read_live

    if not run.exists() and is_uuid(str(run)):
        from ape.cli.flow_run_output import flow_run_output

        folder = flow_run_output(str(run))  # the server knows the folder from the run's config
        if folder is None:
            raise ApeError(
                "ape status takes an output folder; no flow run with this id whose folder is here "
                "was found on the server",
                where=str(run),
                hint="give the run's output folder ([run] output); the flow run's page in the Prefect UI "
                "shows the live view as an artifact",
            )
        run = folder
    paths = find_live(run)
    statuses = [read_live(path) for path in paths]
    if as_json:
        print("[" + ",\n".join(s.model_dump_json(indent=2) for s in statuses) + "]")
        return 0
    blocks = []
    for live in statuses:
        lines = [f"{live.benchmark} · {live.model}"]
        lines += [f"  {what:<19} {value}" for what, value in describe(live)]
        blocks.append("\n".join(lines))
    mirror = mirror_line(run, paths)
    if mirror:
        blocks.append(mirror)
    print(terminal_safe("\n\n".join(blocks)))  # names come from the config (and the file)
    return 0


def mirror_line(run: Path, live_paths: list[Path]) -> str | None:
    """How far the run's Prefect mirror is behind, from the ``mirror.json`` its catch-up
    writes in the output folder (the folder given, or the one above a model's folder); None
    when no catch-up ran for it (the server kept up, or the run had no server)."""
    from ape.server import process_alive
    from ape.tasks.storage.mirror_status import describe_mirror, read_mirror

    folders = [run, *(path.parent for path in live_paths), *(path.parent.parent for path in live_paths)]
    for folder in dict.fromkeys(folders):
        try:
            status = read_mirror(folder)
        except ApeError as exc:
            return f"UI: cannot tell how far the Prefect UI is behind: {exc}"
        if status is not None:
            return describe_mirror(status, folder, alive=process_alive(status.pid))
    return None


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
