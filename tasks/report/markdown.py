"""The report as markdown: ``leaderboard.md``, the printed table and the Prefect artifacts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ape.schemas.report import Envelope, LeaderboardRow, RegressionRow
from ape.tasks.common.inert import md_text
from ape.tasks.common.words import count
from ape.tasks.report.cache_notes import cache_lines
from ape.tasks.report.health import injection_lines, limit_lines, suspect_lines, truncation_lines
from ape.tasks.report.judge_agreement import judge_markdown
from ape.tasks.report.lm_eval_scores import markdown_lines as harness_markdown
from ape.tasks.storage.stage_chains import record_line


def _cell(value: Any, digits: int = 3) -> str:
    """A number as itself; any text (model ids, categories, errors, answers: written by
    configs, data files and models) as inert markdown, see :func:`md_text`."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return str(value)
    return md_text(value) or "-"


def _own(value: str | None) -> str:
    """A word of APE's own vocabulary (a CI method, a test's name): shown as it is."""
    return "-" if value is None else value


def _interval(mean: float | None, low: float | None, high: float | None) -> str:
    if mean is None:
        return "-"
    if low is None or high is None:
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _rank(row: LeaderboardRow) -> str:
    if row.rank_low is None or row.rank_high is None or row.rank_low == row.rank_high:
        return str(row.rank)
    return f"{row.rank} ({row.rank_low}-{row.rank_high})"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def calibration_table(envelope: Envelope) -> list[str]:
    """The calibration table's markdown lines (the leaderboard and the Prefect artifact)."""
    header = ["Model", "ECE", "Brier", "Populated bins", "With confidence", "Without"]
    rows = [
        [_cell(model_id), _cell(c.ece), _cell(c.brier), f"{c.populated_bins}/{c.n_bins}", str(c.n), str(c.missing)]
        for model_id, c in envelope.calibration.items()
    ]
    if any(c.truncated for c in envelope.calibration.values()):  # cut sessions: counted, never scored
        header.append("Cut (left out)")
        for row, c in zip(rows, envelope.calibration.values()):
            row.append(str(c.truncated))
    return _table(header, rows)


def _place(envelope: Envelope, model_id: str) -> int:
    """The model's place on the leaderboard (after every ranked model when it has none)."""
    order = [row.model_id for row in envelope.leaderboard]
    return order.index(model_id) if model_id in order else len(order)


def choice_metrics_lines(envelope: Envelope) -> list[str]:
    """The section of a log-likelihood run: acc and acc_norm of every model, side by side."""
    header = ["Model", "Items", "acc [95% CI]", "acc_norm [95% CI]", "Mean score is"]
    rows = [
        [
            _cell(model_id),
            str(c.n_items),
            _interval(c.acc, c.acc_low, c.acc_high),
            _interval(c.acc_norm, c.acc_norm_low, c.acc_norm_high),
            c.metric,
        ]
        for model_id, c in sorted(envelope.choices.items(), key=lambda pair: _place(envelope, pair[0]))
    ]
    return [
        "## Log-likelihood accuracy",
        "",
        *_table(header, rows),
        "",
        "acc: the gold choice has the highest log-likelihood; acc_norm: the highest per character "
        "of the choice's text (lm-evaluation-harness's two rules). " + _scored_by(envelope),
        "",
    ]


def _scored_by(envelope: Envelope) -> str:
    """What the sessions' scores are: ``[choices] metric``, or in a ``[task] lm_eval`` run the
    task's own first metric (its ``process_results``), aggregated in the harness's table."""
    if isinstance((envelope.summary.model_extra or {}).get("lm_eval"), dict):
        return (
            "The sessions are scored by the harness task's first metric (its process_results); "
            "the lm-evaluation-harness table gives its own aggregation."
        )
    return "[choices] metric picks the one the sessions are scored by."


def markdown_table(envelope: Envelope) -> str:
    """The report as markdown: leaderboard, per-category, pairwise and calibration tables,
    then the summary and provenance lines.

    Each section is built by its own function and is empty when the run has nothing for it,
    so the order of the sections reads here at one glance and a section changes alone."""
    sections = [
        _failure_lines(envelope),
        _health_lines(envelope),
        _leaderboard_lines(envelope),
        unranked_lines(envelope) if envelope.unranked else [],
        choice_metrics_lines(envelope) if envelope.choices else [],
        judge_markdown(envelope.judge) if envelope.judge is not None else [],
        _category_lines(envelope),
        _harness_lines(envelope),
        _pairwise_lines(envelope),
        ["## Calibration", "", *calibration_table(envelope), ""] if envelope.calibration else [],
        _regression_lines(envelope),
        _summary_lines(envelope),
    ]
    return "\n".join(line for section in sections for line in section) + "\n"


def _harness_lines(envelope: Envelope) -> list[str]:
    """A ``[task] lm_eval`` run: the harness's own aggregated metrics beside the leaderboard."""
    scores = (envelope.summary.model_extra or {}).get("lm_eval")
    return harness_markdown(scores) if isinstance(scores, dict) else []


def _failure_lines(envelope: Envelope) -> list[str]:
    """First of all: a report that failed to build says so, before any number is read."""
    if envelope.error is None:
        return []
    return [f"**Report failed** ({envelope.error.type}): {_cell(envelope.error.message)}", ""]


def _health_lines(envelope: Envelope) -> list[str]:
    """Above the tables: these numbers are not a measurement, or a model tried to talk its
    judge round. An unranked model's own section says why it has no result, so its health
    warnings are left out here; its injection flags are not."""
    unranked = {row.model_id for row in envelope.unranked}
    health = {model: entry for model, entry in envelope.health.items() if model not in unranked}
    suspect = (
        suspect_lines(health, md_text)
        + injection_lines(envelope.health, md_text)
        + truncation_lines(envelope.health, md_text)
        + limit_lines(envelope.health, md_text)
    )
    infrastructure = [
        f"**Infrastructure errors:** {row.infrastructure_errors} sessions of model {md_text(row.model_id)} "
        "ended with an infrastructure error (a sandbox that would not start) and are scored nowhere; "
        "`ape retry OUTPUT` redoes them"
        for row in envelope.leaderboard
        if row.infrastructure_errors
    ]
    lines = [*(f"**Run health:** {line}" for line in suspect), *infrastructure]
    return [*lines, ""] if lines else []


@dataclass(frozen=True)
class _Columns:
    """The leaderboard's optional columns, shown only when some model has a value for them,
    so a run without pass@k, costs or a judge keeps a narrow table."""

    pass_at_k: bool
    cost: bool
    injection_flags: bool
    truncated: bool
    truncated_reasoning: bool
    reasoning_tokens: bool

    @classmethod
    def of(cls, envelope: Envelope) -> _Columns:
        rows = envelope.leaderboard
        return cls(
            pass_at_k=any(row.pass_at_k for row in rows),
            cost=any(row.total_cost is not None for row in rows),
            # a judged run always shows the column, so "0" reads as checked, not as unknown
            injection_flags=envelope.judge is not None or any(row.injection_flags for row in rows),
            truncated=any(row.outcomes.TRUNCATED for row in rows),
            truncated_reasoning=any(row.truncated_reasoning for row in rows),
            reasoning_tokens=any(row.mean_reasoning_tokens is not None for row in rows),
        )

    def header(self) -> list[str]:
        header = ["Rank (range)", "Group", "Model", "Items", "Mean score [95% CI]", "CI method", "Pass rate [95% CI]"]
        header += ["pass@k", "pass^k [95% CI]"] if self.pass_at_k else []
        header += ["Solved", "Parse failed", "Gave up"]
        header += ["Truncated"] if self.truncated else []
        header += ["Cut reasoning"] if self.truncated_reasoning else []
        header += ["Error", "Check errors"]
        header += ["Injection flags"] if self.injection_flags else []
        header += ["Latency s", "Tokens in/out"]
        header += ["Reasoning tokens"] if self.reasoning_tokens else []
        header += ["Cost", "Cost/correct", "Cached", "Batched", "Saved by cache"] if self.cost else []
        return header

    def cells(self, row: LeaderboardRow) -> list[str]:
        """One model's cells, in the order of :meth:`header`."""
        cells = [
            _rank(row),
            _cell(row.tie_group),
            _cell(row.model_id),
            str(row.n_items),
            _interval(row.mean_score, row.ci_low, row.ci_high),
            _own(row.ci_method),
            _interval(row.pass_rate, row.pass_rate_low, row.pass_rate_high),
        ]
        if self.pass_at_k:
            cells.append(", ".join(f"@{k} {v:.3f}" for k, v in row.pass_at_k.items()) or "-")
            # pass^1 is pass@1 (the mean of c/n either way): shown once, as @1
            hat = {k: v for k, v in row.pass_hat_k.items() if k != "1"}
            cells.append(", ".join(f"^{k} {_interval(v[0], v[1], v[2])}" for k, v in hat.items()) or "-")
        outcomes = row.outcomes
        cells += [str(outcomes.SOLVED), str(outcomes.PARSING_FAILED), str(outcomes.GAVE_UP)]
        cells += [str(outcomes.TRUNCATED)] if self.truncated else []
        cells += [str(row.truncated_reasoning)] if self.truncated_reasoning else []
        cells.append(str(outcomes.ERROR))
        cells.append(str(row.check_errors))
        cells += [str(row.injection_flags)] if self.injection_flags else []
        cells += [_cell(row.mean_latency_s, 2), f"{_cell(row.mean_input_tokens, 0)}/{_cell(row.mean_output_tokens, 0)}"]
        cells += [_cell(row.mean_reasoning_tokens, 0)] if self.reasoning_tokens else []
        if self.cost:
            cells += [_money(row.total_cost), _money(row.cost_per_correct), str(row.cached), str(row.batched)]
            cells.append(_money(row.cached_cost))
        return cells


def _leaderboard_lines(envelope: Envelope) -> list[str]:
    """The leaderboard section: one row per ranked model, then what the ranks and the
    injection flags mean (the flags' note only when their column is shown)."""
    if not envelope.leaderboard:
        return []
    columns = _Columns.of(envelope)
    lines = [
        "## Leaderboard",
        "",
        *_table(columns.header(), [columns.cells(row) for row in envelope.leaderboard]),
        "",
        "Rank (range): the places a model could hold given the Holm-corrected pairwise "
        "tests; models in one group are not significantly different from its first.",
        "",
    ]
    if columns.cost:
        lines += [
            "Cost: what this run spent; sessions answered from the result cache (Cached) cost nothing, "
            "and Saved by cache is what they would have cost asked again. Batched: sessions sent "
            "through the provider's batch API, at its batch price.",
            "",
        ]
    notes = cache_lines(envelope.leaderboard, envelope.summary.provenance or {})
    lines += [*notes, ""] if notes else []
    if columns.truncated:
        lines += [
            "Truncated: sessions whose final answer was cut at the token limit (counted as not correct, "
            "never parsed); raise [model] max_tokens and redo them with ape retry --outcomes TRUNCATED.",
            "",
        ]
    if columns.truncated_reasoning:
        lines += [
            "Cut reasoning: of the truncated sessions, those whose budget ran out while the model was still "
            "reasoning, before any answer; raise [model] max_tokens or lower [model] reasoning_effort.",
            "",
        ]
    if columns.reasoning_tokens:
        lines += [
            "Reasoning tokens: per session, where the provider reported them; they are part of the output "
            "tokens and priced as output.",
            "",
        ]
    if columns.injection_flags:
        lines += [
            "Injection flags: sessions whose answer addressed the judge (a forged tag or grade, "
            '"ignore the rubric", "reply PASS", ...); graded FAIL without asking the judge '
            'unless [checker] args.on_injection = "grade".',
            "",
        ]
    return lines


def _category_lines(envelope: Envelope) -> list[str]:
    """Mean score and items per category and model; a model without items in a category
    shows "-" rather than a zero it did not earn."""
    categories = sorted({c for row in envelope.leaderboard for c in row.by_category})
    if not categories:
        return []
    header = ["Model", *(_cell(c) for c in categories)]
    rows = [
        [_cell(row.model_id)]
        + [
            f"{_cell(row.by_category[c].mean_score)} ({row.by_category[c].n_items})" if c in row.by_category else "-"
            for c in categories
        ]
        for row in envelope.leaderboard
    ]
    return ["## By category (mean score, items)", "", *_table(header, rows), ""]


_PAIRWISE_HEADER = [
    "A",
    "B",
    "Items",
    "Mean diff A-B [95% CI]",
    "CI method",
    "Win/tie/loss",
    "Only A / only B passed",
    "p (McNemar)",
    "p Holm",
    "r",
    "MDE 80%",
]


def _pairwise_lines(envelope: Envelope) -> list[str]:
    """Every pair of models compared on their shared items, with the test behind each
    group of the leaderboard and what the columns mean."""
    if not envelope.pairwise:
        return []
    rows = [
        [
            _cell(p.model_a),
            _cell(p.model_b),
            str(p.n_items),
            _interval(p.mean_diff, p.ci_low, p.ci_high),
            _own(p.ci_method),
            f"{p.wins}/{p.ties}/{p.losses}",
            f"{p.a_only}/{p.b_only}",
            f"{_cell(p.p_value)} ({p.test})" if p.p_value is not None else "-",
            _cell(p.p_holm) + (" *" if p.significant else ""),
            _cell(p.correlation, 2),
            _cell(p.mde_80),
        ]
        for p in envelope.pairwise
    ]
    return [
        "## Pairwise",
        "",
        *_table(_PAIRWISE_HEADER, rows),
        "",
        "r: correlation of the two models' item scores; MDE 80%: the smallest "
        "difference this comparison detects with 80% power; * significant after Holm.",
        "",
    ]


def _regression_lines(envelope: Envelope) -> list[str]:
    """Each model against its earlier runs (a named run or its own history), with the
    evidence for the verdict and any note on why it could not be compared fully."""
    if not envelope.regressions:
        return []
    header = ["Model", "Against", "Verdict", "Items", "Score diff [95% CI]", "Evidence", "Detectable change"]
    rows = [
        [
            _cell(r.model_id),
            _against(r),
            f"**{r.verdict}**",
            str(r.n_items),
            _interval(r.mean_diff, r.ci_low, r.ci_high),
            _evidence(r),
            _cell(r.min_detectable_change),
        ]
        for r in envelope.regressions
    ]
    notes = [f"- {_cell(r.model_id)} vs {r.against}: {_cell(r.note)}" for r in envelope.regressions if r.note]
    return ["## Changes since earlier runs", "", *_table(header, rows), *notes, ""]


def _summary_lines(envelope: Envelope) -> list[str]:
    """The closing lines: how much was run, how many stage chains the Prefect UI holds,
    and where the numbers came from."""
    summary = envelope.summary
    wall = f", {summary.wall_seconds:.1f} s" if summary.wall_seconds is not None else ""
    lines = [
        f"{count(summary.tasks, 'task')}, {count(summary.models, 'model')}, {count(summary.sessions, 'session')}{wall}"
    ]
    if envelope.stage_chains:
        lines += ["", chains_line(envelope)]
    return lines + _provenance_lines(summary.provenance)


def unranked_lines(envelope: Envelope) -> list[str]:
    """The models with no result (every session errored), apart from the leaderboard, each
    with the error its sessions ended with."""
    header = ["Model", "Items", "Sessions", "Error (sessions)"]
    rows = [
        [
            _cell(row.model_id),
            str(row.n_items),
            str(row.n_sessions),
            f"{_cell(row.error)} ({row.error_sessions})"
            + (f", and {row.distinct_errors - 1} other error(s)" if row.distinct_errors > 1 else ""),
        ]
        for row in envelope.unranked
    ]
    return [
        "## No result (not ranked)",
        "",
        *_table(header, rows),
        "",
        "Every session of these models ended in an error, so they have no score: they are left "
        "out of the ranks, groups and pairwise comparisons above, and out of their run history. "
        "Fix the cause and run again (`ape retry OUTPUT` redoes only the errored items).",
        "",
    ]


def chains_line(envelope: Envelope) -> str:
    """How many stage chains the Prefect UI holds, over the models, and the command that
    records the ones left out."""
    entries = envelope.stage_chains.values()
    commands = [entry.record_command for entry in entries if entry.record_command]
    return record_line(sum(e.recorded for e in entries), sum(e.left_out for e in entries), commands)


def _against(row: RegressionRow) -> str:
    if row.against == "history":
        return f"own history: {row.reference_runs} runs {_cell(row.reference_from)} .. {_cell(row.reference_run_id)}"
    return f"{row.against} run {_cell(row.reference_run_id)}"


def _evidence(row: RegressionRow) -> str:
    if row.against == "history":
        return _cell(row.evidence)
    flips = f"passed now/before only {row.current_only}/{row.reference_only}"
    return f"exact McNemar p = {_cell(row.p_value)} at {row.alpha:.2g}; {flips}"


def _provenance_lines(provenance: Mapping[str, Any]) -> list[str]:
    runs = provenance.get("runs") or {}
    report = provenance.get("report") or {}
    if not runs and not report:
        return []
    first: Mapping[str, Any] = next(iter(runs.values()), {})
    # read from the output folder's files, which may have been copied from anywhere
    parts = [f"APE {_cell(str(report.get('ape_version') or first.get('ape_version') or '?'))}"]
    if first.get("config_sha256"):
        parts.append(f"config sha256 {_cell(str(first['config_sha256'])[:12])}")
    if first.get("data_sha256"):
        parts.append(f"data sha256 {_cell(str(first['data_sha256'])[:12])}")
    if first.get("git_commit"):
        parts.append(f"git {_cell(str(first['git_commit'])[:10])}" + (" (dirty)" if first.get("git_dirty") else ""))
    return ["", "Provenance: " + ", ".join(parts) + " (full record in report.json)"]
