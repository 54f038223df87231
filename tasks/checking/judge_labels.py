"""The judge's calibration set: solutions people graded, graded again by the judge at the start of a run.

``[checker] args.calibration_file`` (relative to the config file) is JSON Lines, one
graded solution per line: the item's fields (as in the data file), plus

- ``solution``: the answer as the judge sees it (text, or any JSON value);
- ``human``: the people's grade on the judge's scale (pass/fail: ``PASS``/``FAIL``,
  ``true``/``false`` or ``1``/``0``; 0-N: an integer 0..N);
- ``model`` (optional): the model whose answer it is (see
  :mod:`ape.tasks.stats.judge_agreement` for how it is used).

At the start of a run (before any model is evaluated) :func:`grade_labelled_solutions` has the
judge grade every line, through the same checker (so the judge's cache and limits
apply), and writes ``judge_calibration.json`` into the output folder:
``{"judge", "fingerprint", "file", "labels", "pass_mark", "rows": [{"line", "item_id",
"model", "human", "judge", "human_score", "judge_score", "error"}], "input_tokens",
"output_tokens", "cost", "errors"}``. The report (:mod:`ape.tasks.report.judge_agreement`) reads it.
A line the judge could not grade has ``judge`` null and its ``error``; it is left out of
the agreement and counted.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ape.schemas.config import ApeConfig
from ape.schemas.data import item_id
from ape.schemas.errors import ApeError, validation_lines
from ape.tasks.checking.judge import JudgeChecker, JudgeSpec, Scale, judge_factory, resolve_judge
from ape.tasks.storage.runs import cache_dir
from ape.tasks.storage.save import atomic_write_text

log = logging.getLogger("ape")

CALIBRATION_FILE = "judge_calibration.json"
WHERE = "[checker] args.calibration_file"
RESERVED = ("solution", "human", "model")


class CalibrationRow(BaseModel):
    """One line of the calibration file, validated."""

    line: int
    item: Any
    solution: Any
    human: str
    model: str | None = None


def load_calibration(path: Path, data_model: type[BaseModel], scale: Scale) -> list[CalibrationRow]:
    """Read and check every line now: a bad line is one error naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ApeError(
            f"cannot read the calibration file {path}: {exc}",
            where=WHERE,
            hint="paths are relative to the config file's folder",
        ) from None
    rows: list[CalibrationRow] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise ApeError(f"not a JSON object: {exc}", where=where) from None
        if not isinstance(raw, dict):
            raise ApeError("each line must be a JSON object (the item's fields, solution, human)", where=where)
        missing = [key for key in ("solution", "human") if key not in raw]
        if missing:
            raise ApeError(
                f"the line lacks {' and '.join(repr(k) for k in missing)}",
                where=where,
                hint='each line: the item\'s fields, "solution" and "human" (the people\'s grade)',
            )
        try:
            human = scale.label(raw["human"])
        except ValueError as exc:
            raise ApeError(f"'human': {exc}", where=where) from None
        fields = {k: v for k, v in raw.items() if k not in RESERVED}
        try:
            item = data_model.model_validate(fields)
        except ValidationError as exc:
            raise ApeError(f"not a valid {data_model.__name__}: {validation_lines(exc)[0]}", where=where) from None
        model = raw.get("model")
        rows.append(
            CalibrationRow(
                line=number,
                item=item,
                solution=raw["solution"],
                human=human,
                model=None if model is None else str(model),
            )
        )
    if len(rows) < 2:
        raise ApeError(
            f"{path} has {len(rows)} graded line(s); calibration needs at least 2 (better 50 or more)", where=WHERE
        )
    return rows


def grade_labelled_solutions(
    config: ApeConfig, spec: JudgeSpec, checker: JudgeChecker, data_model: type[BaseModel]
) -> dict[str, Any]:
    """Have the judge (``spec``, asked through ``checker``) grade the calibration file;
    write and return ``judge_calibration.json``."""
    args = spec.args
    path = spec.calibration_file
    assert path is not None
    scale = spec.scale
    rows = load_calibration(path, data_model, scale)
    out: list[dict[str, Any]] = []
    tokens_in = tokens_out = 0
    cost: float | None = None
    for row in rows:
        entry: dict[str, Any] = {
            "line": row.line,
            "item_id": _id(row.item),
            "model": row.model,
            "human": row.human,
            "human_score": scale.score(row.human),
            "judge": None,
            "judge_score": None,
            "error": None,
        }
        try:
            graded = checker.grade(checker.prompt(row.item, row.solution))
        except Exception as exc:  # counted and shown; the run goes on
            entry["error"] = f"{type(exc).__name__}: {exc}"
        else:
            entry.update(judge=graded["grade"], judge_score=graded["score"])
            if not graded.get("cached"):
                tokens_in += graded.get("input_tokens") or 0
                tokens_out += graded.get("output_tokens") or 0
                if graded.get("cost") is not None:
                    cost = (cost or 0.0) + graded["cost"]
        out.append(entry)
    errors = sum(1 for entry in out if entry["error"])
    if errors:
        first = next(entry for entry in out if entry["error"])
        log.warning(
            "judge calibration: %d of %d line(s) of %s not graded; first: line %d: %s",
            errors,
            len(out),
            path,
            first["line"],
            first["error"],
        )
    result = {
        "judge": checker.model_cfg.model_id,
        "fingerprint": checker.fingerprint,
        "file": str(path),
        "labels": scale.labels,
        "pass_mark": args.pass_mark,
        "rows": out,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cost": cost,
        "errors": errors,
    }
    write_json(Path(config.run.output) / CALIBRATION_FILE, result)
    return result


def check_calibration_file(spec: JudgeSpec, data_model: type[BaseModel]) -> None:
    """A judge's calibration file (``[checker] args.calibration_file``) is read now, so a
    missing file or a bad row is one line before any model call, not after the run."""
    if spec.calibration_file is not None:
        load_calibration(spec.calibration_file, data_model, spec.scale)


def measure_agreement(
    config: ApeConfig, data_model: type[BaseModel], spec: JudgeSpec | None = None
) -> dict[str, Any] | None:
    """:func:`grade_labelled_solutions` for a judge checker with a calibration file; None otherwise.
    ``spec``: the judge preflight resolved (resolved here when None)."""
    if config.checker.implementation != "judge" or not config.checker.args.get("calibration_file"):
        return None
    spec = spec if spec is not None else resolve_judge(config)
    checker = judge_factory(config, data_model, cache_dir(config) if config.run.cache else None, spec)()
    result = grade_labelled_solutions(config, spec, checker, data_model)
    graded = len(result["rows"]) - result["errors"]
    agree = sum(1 for r in result["rows"] if r["judge"] is not None and r["judge"] == r["human"])
    log.info("judge %s agrees with people on %d of %d calibration solutions", result["judge"], agree, graded)
    return result


def _id(item: Any) -> str | None:
    try:
        return item_id(item)
    except (ValueError, AttributeError):
        return None


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (never half-written), with the user's usual permissions."""

    atomic_write_text(path, json.dumps(data, indent=2, default=str))
