"""The ``judge`` checker: a chat model grades each solution against a rubric.

Open answers (summaries, explanations, refusals) have no exact reference to compare
with, so ``[checker] implementation = "judge"`` asks a model. Any configured chat model
judges: a ``[[model]]`` entry named by ``[checker] judge = "name"``, or a
``[checker.judge]`` block of its own (the keys of a ``[[model]]``). The judge is built
like a solved model (:func:`ape.tasks.models.build.build_model`), so its calls are
retried and rate-limited the same way, and a judge that is also a ``[[model]]`` shares
that model's limiter.

``[checker] args`` (:class:`JudgeArgs`):

- ``rubric`` (inline) or ``rubric_file`` (a mustache file beside the config): the
  prompt. Its variables are the item's fields, ``solution`` (the parsed solution as
  text) and ``reference`` (the item's ``reference_field``, empty when unset). APE adds
  one line saying how to give the grade, so answers parse strictly.
- ``scale``: ``"pass/fail"`` (``GRADE: PASS`` or ``GRADE: FAIL``, scored 1 or 0) or
  ``"0-N"`` (``GRADE: k`` for an integer k in 0..N, scored k / N).
- ``pass_mark``: the score from which a grade counts as passed (default 0.5).
- ``calibration_file``: human grades on a few solutions
  (:mod:`ape.tasks.checking.judge_labels`).
- ``on_injection``: what an answer that addresses the grader gets
  (:mod:`ape.tasks.checking.injection`): ``"fail"`` (the default) grades it FAIL, score 0,
  without asking the judge, with ``reason = "injection: ..."`` and the findings under
  ``injection`` in the check's metadata; ``"grade"`` lets the judge grade it (for tasks
  whose honest answers talk about grading), still flagged the same way.
- ``injection_canary``: before the run the judge must grade FAIL a few known wrong answers
  carrying injections (:mod:`ape.tasks.checking.judge_canary`; default true).

Injected answers: the solution reaches the judge between two markers it cannot forge
(``<<<SOLUTION-T>>>`` ... ``<<<END-SOLUTION-T>>>``, :class:`ape.tasks.checking.injection.Boundary`),
and APE adds a line saying that the text inside is data to grade, never instructions. The
flagged sessions are counted per model in the report and run health marks a model whose
answers do this often (:mod:`ape.tasks.report.health`). Why a flagged answer fails rather
than being graded: a judge that obeys what it reads cannot be defended by wording alone
(arXiv:2507.08794, arXiv:2402.14016).

Strict parsing: the answer must hold exactly one ``GRADE:`` line (reasoning before it
is fine) with a value on the scale. An answer that does not parse gets the reformat
prompts a solver gets (``[solver] solution_adaption_attempts`` and ``reformat_prompt``,
through the same :func:`ape.tasks.solving.solve.solve_session`); if none parses, or
the judge model fails, the checker raises and the session gets a check error: a judge
failure is never a score.

Every check's metadata (in ``sessions.jsonl``, ``sessions.log`` and the
``check_metadata`` column of ``sessions.parquet``) holds ``judge``: the judge model,
its fingerprint, the prompt, its answer, the parsed grade and score, the attempts, its
tokens and cost at the judge's prices (never added to the solved model's), and whether
it came from the cache. Successful judgements are cached in ``.cache/judge/`` under a
key of the judge's fingerprint, the prompt and the parse settings, so a rerun, a
re-score or ``ape retry`` calls the judge only for what it has not graded; a failed
judgement is not cached, so a retry asks again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ape.schemas.check import Failed, Passed
from ape.schemas.config import ApeConfig, ModelConfig, SolverConfig
from ape.schemas.errors import ApeError, did_you_mean, validation_error
from ape.schemas.results import Outcome
from ape.tasks.checking.builtin import item_value
from ape.tasks.checking.injection import Finding, boundary_for, describe, find_injections, prompt_tags
from ape.tasks.models.build import build_model
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.solving.render import item_context, render_context, schema_variables, template_variables
from ape.tasks.solving.solve import solve_session
from ape.tasks.stats.cost import session_cost
from ape.tasks.storage.save import atomic_write_text

WHERE = "[checker] judge"
WHERE_ARGS = "[checker] args"
# Change when a change here would make cached judgements wrong.
# 2: the solution is rendered inside a boundary, with the line that says it is data.
JUDGE_CODE_VERSION = "2"
GRADE_LINE = re.compile(r"^\s*\**\s*GRADE\s*\**\s*:\s*\**\s*(?P<value>[^*\s]+)\s*\**\s*$", re.I | re.M)


class JudgeError(Exception):
    """The judge could not grade a solution (model failure or no parsable grade)."""


class JudgeTruncated(JudgeError):
    """The judge's own answer was cut at its token limit, also when asked again: no verdict.

    A cut answer is a prefix; a ``GRADE:`` line in it (or a grade the reformat prompt
    would pull out of it) is not the judge's finished verdict, so it never becomes a score.
    It is a check error of its own type, counted with the run's check errors and shown by
    run health with its hint, and ``ape retry`` re-grades it (after the judge's
    ``[model] max_tokens`` is raised)."""


# asked once more, after a cut answer: the verdict first, within the same budget
CUT_RETRY_LINE = (
    "Your previous answer to this was cut off at the token limit before it gave the grade. "
    "Answer again, briefly: give the GRADE line first, then at most one sentence of reason."
)


@dataclass(frozen=True)
class Scale:
    """A grading scale: pass/fail (``points`` None) or the integers 0..points."""

    points: int | None = None

    @property
    def labels(self) -> list[str]:
        """The grades a judge (or a person) can give, lowest first."""
        return ["FAIL", "PASS"] if self.points is None else [str(k) for k in range(self.points + 1)]

    def instruction(self) -> str:
        if self.points is None:
            return "End your reply with one line holding only the grade: GRADE: PASS or GRADE: FAIL"
        return f"End your reply with one line holding only the grade, an integer from 0 to {self.points}: GRADE: <n>"

    def score(self, label: str) -> float:
        """A label's score in [0, 1]."""
        index = self.labels.index(label)
        return float(index) if self.points is None else index / self.points

    def label(self, value: Any) -> str:
        """A grade (the judge's text, or a person's grade) as one of :attr:`labels`.

        Pass/fail accepts PASS/FAIL, true/false, 1/0 and yes/no; 0-N accepts the integers.
        Raises ValueError naming what is accepted.
        """
        text = str(value).strip().strip(".").upper()
        if self.points is None:
            if text in {"PASS", "PASSED", "TRUE", "1", "YES", "1.0"}:
                return "PASS"
            if text in {"FAIL", "FAILED", "FALSE", "0", "NO", "0.0"}:
                return "FAIL"
            raise ValueError(f"'{value}' is not a grade on the pass/fail scale (PASS or FAIL)")
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if not number.is_integer() or not 0 <= number <= self.points:
            raise ValueError(f"'{value}' is not a grade on the 0-{self.points} scale (an integer 0..{self.points})")
        return str(int(number))


def parse_scale(text: str) -> Scale:
    """``"pass/fail"`` or ``"0-N"`` (N from 1 to 100)."""
    cleaned = text.strip().lower().replace(" ", "")
    if cleaned in {"pass/fail", "pass-fail", "passfail", "binary"}:
        return Scale(None)
    found = re.fullmatch(r"0-(\d{1,3})", cleaned)
    if found and 1 <= int(found.group(1)) <= 100:
        return Scale(int(found.group(1)))
    raise ValueError(f'\'{text}\' is not a scale; use "pass/fail" or "0-N" with N from 1 to 100, e.g. "0-5"')


def parse_grade(text: str, scale: Scale) -> str:
    """The one grade in a judge's answer, strictly: exactly one ``GRADE:`` line whose value
    is on the scale (repeated lines with the same value count as one)."""
    values = {match.group("value").strip() for match in GRADE_LINE.finditer(text)}
    if not values:
        raise ValueError(f"no 'GRADE: ...' line in the answer; {scale.instruction()}")
    labels = {scale.label(value) for value in values}
    if len(labels) > 1:
        raise ValueError(f"the answer gives several grades ({', '.join(sorted(labels))}); give exactly one")
    return labels.pop()


class JudgeArgs(BaseModel):
    """``[checker] args`` of the ``judge`` checker."""

    model_config = ConfigDict(extra="forbid")

    rubric: str | None = Field(default=None, description="The judge's prompt (mustache), inline.")
    rubric_file: str | None = Field(default=None, description="The judge's prompt as a mustache file.")
    scale: str = Field(default="pass/fail", description='"pass/fail" or "0-N" (scored k / N).')
    reference_field: str | None = Field(default=None, description="Item field offered as {{ reference }}.")
    pass_mark: float = Field(default=0.5, ge=0.0, le=1.0, description="Scores from here on count as passed.")
    calibration_file: str | None = Field(
        default=None, description="JSONL of items with a solution and a human grade (see judge_labels)."
    )
    on_injection: Literal["fail", "grade"] = Field(
        default="fail",
        description='An answer that addresses the grader: "fail" grades it FAIL without asking the judge, '
        '"grade" lets the judge grade it; flagged either way.',
    )
    injection_canary: bool = Field(
        default=True, description="Before the run the judge must fail known wrong answers carrying injections."
    )

    @field_validator("scale")
    @classmethod
    def _scale(cls, value: str) -> str:
        parse_scale(value)
        return value

    @model_validator(mode="after")
    def _one_rubric(self) -> JudgeArgs:
        if (self.rubric is None) == (self.rubric_file is None):
            raise ValueError("set exactly one of 'rubric' or 'rubric_file'")
        return self


def parse_args(args: dict[str, Any]) -> JudgeArgs:
    try:
        return JudgeArgs.model_validate(args)
    except ValidationError as exc:
        raise validation_error(
            exc,
            "bad argument for checker 'judge'",
            where=WHERE_ARGS,
            hint=f"accepted: {', '.join(JudgeArgs.model_fields)}",
            fields=JudgeArgs.model_fields,
            default="args",
        ) from None


def judge_model_config(config: ApeConfig) -> ModelConfig:
    """The judge's model: the ``[[model]]`` that ``[checker] judge`` names, or its own block."""
    judge = config.checker.judge
    src = f"{config.shown_file()} "
    if judge is None:
        raise ApeError(
            "the judge checker needs a judge model",
            where=src + WHERE,
            hint='name a [[model]] (judge = "my-model") or add a [checker.judge] block with provider and model',
        )
    if isinstance(judge, ModelConfig):
        if judge.provider and judge.provider.strip().lower() == "llama-cpp":
            raise ApeError(
                "a [checker.judge] block cannot use provider 'llama-cpp' (APE serves only [[model]] entries)",
                where=src + WHERE,
                hint='add the GGUF model as a [[model]] and name it: judge = "its-name"',
            )
        return judge
    names = [m.model_id for m in config.model]
    for model in config.model:
        if model.model_id == judge:
            return model
    raise ApeError(
        f"no [[model]] is named '{judge}' (models: {', '.join(names)})",
        where=src + WHERE,
        hint=did_you_mean(judge, names) or "or give the judge its own [checker.judge] block",
    )


@dataclass(frozen=True)
class JudgeSpec:
    """The judge as the config describes it, resolved once: its arguments, its model, the
    rubric's text, the calibration file and the fingerprint of all of them.

    Preflight resolves it (:func:`resolve_judge`) and hands it to everything that needs the
    judge (the checker factory, the resume fingerprint, the calibration check and grading,
    the canary), so a rubric file is read once and every part of a run grades with the same
    judge, rather than each part reading ``[checker] args`` and the judge's model again."""

    args: JudgeArgs
    model_cfg: ModelConfig
    rubric: str
    calibration_file: Path | None
    fingerprint: dict[str, Any] | None  # None when the judge's model file cannot be read
    own_model: bool = False  # a [checker.judge] block of its own, not a [[model]] it names

    @property
    def scale(self) -> Scale:
        return parse_scale(self.args.scale)

    def at_local_servers(self, base_urls: dict[str, str]) -> JudgeSpec:
        """This judge with the endpoint of a ``llama-cpp`` model APE serves (``base_urls``:
        model id to URL, :func:`ape.tasks.models.local.llama_server.local_model_servers`); the
        fingerprint stays (a local server's port is not part of it)."""
        url = base_urls.get(self.model_cfg.model_id)
        if url is None or self.model_cfg.base_url == url:
            return self
        return replace(self, model_cfg=self.model_cfg.model_copy(update={"base_url": url}))


def resolve_judge(config: ApeConfig) -> JudgeSpec:
    """The judge of a ``judge`` checker (:class:`JudgeSpec`); an ApeError naming the key
    for a bad argument, a missing judge model or an unreadable rubric file."""
    args = parse_args(dict(config.checker.args))
    model_cfg = judge_model_config(config)
    rubric = read_rubric(args, config.base_dir)
    calibration = resolve_path(args.calibration_file, config.base_dir) if args.calibration_file else None
    own = isinstance(config.checker.judge, ModelConfig)
    try:
        model = model_fingerprint(model_cfg)
    except OSError:  # a GGUF file that is not there: building the model says so, naming the key
        return JudgeSpec(args, model_cfg, rubric, calibration, None, own)
    fingerprint = {
        "version": JUDGE_CODE_VERSION,
        "model": model,
        "rubric_sha256": hashlib.sha256(rubric.encode()).hexdigest(),
        "scale": parse_scale(args.scale).labels,
        "pass_mark": args.pass_mark,
        "reference_field": args.reference_field,
        "attempts": config.solver.solution_adaption_attempts,
        "reformat_prompt": config.solver.reformat_prompt,
    }
    return JudgeSpec(args, model_cfg, rubric, calibration, fingerprint, own)


def judge_fingerprint(config: ApeConfig, spec: JudgeSpec | None = None) -> dict[str, Any] | None:
    """What makes the judge's grades what they are: its model, rubric text, scale and pass
    mark, and how its answers are parsed. Part of the checker's fingerprint (resume,
    regression comparisons); None for other checkers or a judge config that is invalid.
    ``spec``: the judge already resolved for this config (else it is resolved here)."""

    if config.checker.implementation != "judge":
        return None
    if spec is not None:
        return spec.fingerprint
    try:
        return resolve_judge(config).fingerprint
    except (ApeError, OSError):
        return None


def checker_fingerprint(
    config: ApeConfig, exclude: frozenset[str] = frozenset({"timeout_s"}), spec: JudgeSpec | None = None
) -> Any:
    """The checker part of resume and regression fingerprints: the ``[checker]`` section
    (``exclude``: the time limit) plus, for a judge, :func:`judge_fingerprint`, so a changed judge
    model or rubric file counts as a changed checker. ``spec``: the judge already resolved."""
    section = config.checker.model_dump(mode="json", exclude=set(exclude))
    judge = judge_fingerprint(config, spec)
    if judge is None:
        return section
    return {**section, "judge_fingerprint": judge}


def read_rubric(args: JudgeArgs, base_dir: Path) -> str:
    if args.rubric is not None:
        return args.rubric
    assert args.rubric_file is not None
    path = resolve_path(args.rubric_file, base_dir)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ApeError(
            f"cannot read the rubric file {path}: {exc}",
            where=WHERE_ARGS + ".rubric_file",
            hint="paths are relative to the config file's folder",
        ) from None


def resolve_path(text: str, base_dir: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else Path(base_dir) / path


def check_rubric(rubric: str, data_model: type[BaseModel]) -> None:
    """Every rubric variable must be an item field, ``solution`` or ``reference``."""

    try:
        used = template_variables(rubric)
    except Exception as exc:
        raise ApeError(f"invalid mustache rubric: {exc}", where=WHERE_ARGS + ".rubric") from None
    known = schema_variables(data_model) | {"solution", "reference"}
    for name in sorted(used - known):
        raise ApeError(
            f"rubric variable '{{{{ {name} }}}}' is neither a field of {data_model.__name__} nor solution/reference",
            where=WHERE_ARGS + ".rubric",
            hint=did_you_mean(name, known) or f"variables: {', '.join(sorted(known))}",
        )


def solution_text(solution: Any) -> str:
    if isinstance(solution, str):
        return solution
    if isinstance(solution, BaseModel):
        return solution.model_dump_json()
    try:
        return json.dumps(solution, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(solution)


class JudgeChecker:
    """``(item, solution) -> Passed | Failed``, graded by a chat model (see the module doc).

    ``defence=False`` renders the solution verbatim and flags nothing, as before the
    boundary existed: only for measuring what the defence changes
    (``benchmarks/judge_injection.py``); no config reaches it.
    """

    metric = "judge"

    def __init__(
        self,
        model_cfg: ModelConfig,
        args: JudgeArgs,
        rubric: str,
        solver: SolverConfig,
        base_dir: Path,
        cache_dir: Path | None,
        fingerprint: dict[str, Any] | None = None,
        *,
        defence: bool = True,
    ):

        # a judge answers interactively (a grade waits for it), also when its [[model]] batches
        self.model_cfg = model_cfg.model_copy(update={"batch": False}) if model_cfg.batch else model_cfg
        self.args = args
        self.rubric = rubric
        self.scale = parse_scale(args.scale)
        self.cache_dir = cache_dir
        self.fingerprint = fingerprint or {}
        self.fingerprint_key = hashlib.sha256(json.dumps(self.fingerprint, sort_keys=True, default=str).encode())
        # the judge gets one call, then the solver's reformat attempts; no tools
        self.settings = SolverConfig(
            max_steps=1,
            solution_adaption_attempts=solver.solution_adaption_attempts,
            reformat_prompt=solver.reformat_prompt,
        )
        self.model = build_model(model_cfg, base_dir)
        self.defence = defence
        self.tags = prompt_tags(rubric)  # the markup an answer may not imitate

    def __repr__(self) -> str:
        return f"JudgeChecker({self.model_cfg.model_id!r}, scale={self.args.scale!r})"

    def prompt(self, item: Any, solution: Any) -> str:
        """The judge's prompt: the rubric with the item's fields, the reference and the solution
        (inside its boundary, see :mod:`ape.tasks.checking.injection`), then APE's lines."""

        context = item_context(item) if isinstance(item, BaseModel) else dict(item)
        text = solution_text(solution)
        ending = self.scale.instruction()
        if self.defence:
            # the item's fields and the judge fix the boundary, so a rerun renders the same prompt
            seed = self.fingerprint_key.hexdigest() + json.dumps(context, sort_keys=True, default=str)
            boundary = boundary_for(seed, text)
            text = boundary.wrap(text)
            ending = boundary.instruction() + "\n" + ending
        context.update(solution=text, reference=self._reference(item))
        return render_context(self.rubric, context).rstrip() + "\n\n" + ending

    def _reference(self, item: Any) -> str:

        return solution_text(item_value(item, self.args.reference_field)) if self.args.reference_field else ""

    def injections(self, solution: Any) -> list[Finding]:
        """What in the solution addresses the grader (empty with the defence off)."""
        return find_injections(solution_text(solution), self.tags) if self.defence else []

    def __call__(self, item: Any, solution: Any) -> Passed | Failed:
        found = self.injections(solution)
        if found and self.args.on_injection == "fail":
            return self._refused(item, found)
        graded = self.judged(item, solution)
        if found:
            graded.metadata["injection"] = [f.as_dict() for f in found]
        return graded

    def _refused(self, item: Any, found: list[Finding]) -> Failed:
        """A flagged answer's grade, given without asking the judge (``on_injection = "fail"``)."""
        metadata: dict[str, Any] = {"metric": "judge", "injection": [f.as_dict() for f in found]}
        if self.args.reference_field:
            metadata["expected"] = self._reference(item)
        return Failed(score=0.0, reason=f"injection: {describe(found)}", metadata=metadata)

    def judged(self, item: Any, solution: Any) -> Passed | Failed:
        """The judge's grade of the solution, whatever it holds (the judge canary asks this way)."""
        graded = self.grade(self.prompt(item, solution))
        score = graded["score"]
        metadata = {"metric": "judge", "judge": graded}
        if score >= self.args.pass_mark:
            return Passed(score=score, metadata=metadata)
        if self.args.reference_field:
            metadata["expected"] = self._reference(item)
        return Failed(score=score, reason=f"the judge graded {graded['grade']}", metadata=metadata)

    def grade(self, prompt: str) -> dict[str, Any]:
        """The judge's grade on one rendered prompt: from the cache, or asked now."""
        key = self._key(prompt)
        cached = self._load(key)
        if cached is not None:
            return {**cached, "cached": True}
        graded = self._ask(prompt)
        self._store(key, graded)
        return {**graded, "cached": False}

    def _ask(self, prompt: str) -> dict[str, Any]:

        scale = self.scale
        model_id = self.model_cfg.model_id
        record = solve_session(
            self.model, prompt, None, adapter=lambda text: parse_grade(text, scale), settings=self.settings
        )
        asked = [record]
        if record.outcome is Outcome.TRUNCATED:  # a prefix is no verdict: ask once more, verdict first
            record = solve_session(
                self.model,
                prompt + "\n\n" + CUT_RETRY_LINE,
                None,
                adapter=lambda text: parse_grade(text, scale),
                settings=self.settings,
            )
            asked.append(record)
        if record.outcome is Outcome.TRUNCATED:
            raise JudgeTruncated(
                f"judge '{model_id}' answer was cut at its token limit (stop reason {record.stop_reason}) "
                f"before a verdict, {len(asked)} time(s): not a grade; raise the judge's [model] max_tokens, "
                f"then ape retry re-grades it; cut answer: {(record.raw_output or '')[:200]!r}"
            )
        if record.outcome is not Outcome.SOLVED:
            error = record.error
            detail = f"{error.type}: {error.message}" if error else record.outcome.value
            if record.outcome is Outcome.PARSING_FAILED:
                raise JudgeError(
                    f"judge '{model_id}' gave no parsable grade in {self.settings.solution_adaption_attempts} "
                    f"attempt(s): {detail}; last answer: {(record.raw_output or '')[:200]!r}"
                )
            if record.outcome is Outcome.GAVE_UP:
                raise JudgeError(f"judge '{model_id}' gave up instead of grading")
            raise JudgeError(f"judge '{model_id}' failed: {detail}")
        label = str(record.solution)
        input_tokens = _total(r.input_tokens for r in asked)  # the cut answer was paid for too
        output_tokens = _total(r.output_tokens for r in asked)
        attempts = sum(1 for entry in record.transcript if entry.kind.value == "PARSE_ATTEMPT")
        return {
            "model": model_id,
            "fingerprint": self.fingerprint_key.hexdigest()[:16],
            "prompt": prompt,
            "answer": record.raw_output,
            "grade": label,
            "score": scale.score(label),
            "attempts": attempts,
            "cut_retries": len(asked) - 1,  # answers cut at the token limit before this one
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost": session_cost(self.model_cfg, input_tokens, output_tokens),
        }

    # -- the judgement cache ---------------------------------------------------------------
    def _key(self, prompt: str) -> str:
        digest = self.fingerprint_key.copy()
        digest.update(b"\0" + prompt.encode())
        return digest.hexdigest()

    def _path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / "judge" / key[:2] / f"{key}.json"

    def _load(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a damaged entry is asked again, and replaced
            return None
        return value if isinstance(value, dict) and "score" in value else None

    def _store(self, key: str, graded: dict[str, Any]) -> None:

        path = self._path(key)
        if path is not None:
            atomic_write_text(path, json.dumps(graded, default=str))


def _total(counts: Iterable[int | None]) -> int | None:
    """The sum of the known token counts; None when no answer reported any."""
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def judge_factory(
    config: ApeConfig, data_model: type[BaseModel], cache_dir: Path | None, spec: JudgeSpec | None = None
) -> Callable[[], JudgeChecker]:
    """Check the judge against the data model now (a bad rubric variable or reference field
    fails at start; the run's plan checks a calibration file,
    :func:`ape.tasks.checking.judge_labels.check_calibration_file`) and return a maker of
    checker instances (one per ``checker_workers`` slot). ``spec``: the judge preflight
    resolved (:func:`resolve_judge`); resolved here when None."""
    spec = spec if spec is not None else resolve_judge(config)
    args = spec.args
    check_rubric(spec.rubric, data_model)
    if args.reference_field and args.reference_field not in data_model.model_fields:
        known = list(data_model.model_fields)
        raise ApeError(
            f"'{args.reference_field}' is not a field of {data_model.__name__} (fields: {', '.join(known)})",
            where=WHERE_ARGS + ".reference_field",
            hint=did_you_mean(args.reference_field, known),
        )

    def make() -> JudgeChecker:
        return JudgeChecker(
            spec.model_cfg, args, spec.rubric, config.solver, config.base_dir, cache_dir, spec.fingerprint
        )

    return make
