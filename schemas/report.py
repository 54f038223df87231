"""The report contract: the JSON envelope that ``ape report`` and the benchmark flow write.

One :class:`Envelope` holds the leaderboard, the pairwise model comparisons, the
per-model calibration and a summary; when building the report failed, ``error``
says why and the other parts hold whatever was computed before the failure.
Numbers that cannot be computed (a mean over nothing, an interval from one
item) are ``null``, never ``NaN``, so the file is plain JSON for any reader.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ReportModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutcomeCounts(ReportModel):
    """Sessions per solver outcome (the names of ``ape.schemas.results.Outcome``)."""

    SOLVED: int = 0
    PARSING_FAILED: int = 0
    GAVE_UP: int = 0
    TRUNCATED: int = 0
    ERROR: int = 0


class CategoryScore(ReportModel):
    """One model's results on the items of one category."""

    n_items: int
    mean_score: float | None = None
    pass_rate: float | None = None


class LeaderboardRow(ReportModel):
    """One model's standing. Means are over items (each item's runs averaged first)."""

    rank: int
    model_id: str
    n_items: int
    n_sessions: int
    runs_per_data: int = Field(description="Most sessions seen for one item.")
    mean_score: float | None = None
    score_se: float | None = Field(default=None, description="Standard error over items.")
    ci_low: float | None = Field(default=None, description="95% interval (see ci_method), low end.")
    ci_high: float | None = Field(default=None, description="95% interval (see ci_method), high end.")
    pass_rate: float | None = Field(default=None, description="Share of sessions judged correct.")
    pass_at_k: dict[str, float] = Field(
        default_factory=dict, description="k -> unbiased pass@k (only when runs_per_data > 1)."
    )
    pass_hat_k: dict[str, list[float | None]] = Field(
        default_factory=dict,
        description="k -> [pass^k, low, high]: the share of items whose k runs all pass (unbiased, "
        "C(c,k)/C(n,k) per item, averaged), with its 95% interval over items (only when runs_per_data > 1).",
    )
    outcomes: OutcomeCounts = Field(default_factory=OutcomeCounts)
    check_errors: int = Field(default=0, description="Sessions whose checker raised.")
    cached: int = Field(default=0, description="Sessions answered from the result cache.")
    batched: int = Field(
        default=0, description="Sessions answered through the provider's batch API ([model] batch), at the batch price."
    )
    mean_latency_s: float | None = None
    mean_input_tokens: float | None = None
    mean_output_tokens: float | None = None
    by_category: dict[str, CategoryScore] = Field(default_factory=dict)
    ci_method: str | None = Field(
        default=None,
        description="How ci_low/ci_high were computed: wilson, wilson-clustered (pass rates), "
        "bca, bca-clustered (graded scores).",
    )
    n_effective: float | None = Field(
        default=None, description="Effective sample size behind the interval (clustering lowers it)."
    )
    pass_rate_low: float | None = Field(default=None, description="Wilson 95% interval of pass_rate, low end.")
    pass_rate_high: float | None = Field(default=None, description="Wilson 95% interval of pass_rate, high end.")
    rank_low: int | None = Field(
        default=None, description="Best rank this model could hold (Holm-corrected pairwise tests)."
    )
    rank_high: int | None = Field(default=None, description="Worst rank this model could hold.")
    tie_group: int | None = Field(
        default=None, description="Models in one group cannot be told apart from the group's first."
    )
    total_input_tokens: float | None = None
    total_output_tokens: float | None = None
    mean_reasoning_tokens: float | None = Field(
        default=None,
        description="Reasoning tokens per session, over the sessions whose provider reported them (null: none did).",
    )
    total_reasoning_tokens: float | None = Field(
        default=None, description="Reasoning tokens in all; part of total_output_tokens and billed with them."
    )
    truncated_reasoning: int = Field(
        default=0,
        description="TRUNCATED sessions cut while still reasoning (the budget spent thinking, no answer begun).",
    )
    truncated_answer: int = Field(default=0, description="TRUNCATED sessions whose answer was cut after its reasoning.")
    total_cost: float | None = Field(
        default=None,
        description="What this model's sessions cost: answers from the result cache cost nothing (null: no prices).",
    )
    cost_per_session: float | None = None
    cost_per_correct: float | None = Field(default=None, description="total_cost / correct sessions.")
    cached_cost: float | None = Field(
        default=None,
        description="What the sessions answered from the result cache would have cost asked again: "
        "the money the cache saved, apart from total_cost (null: none cached, or no prices).",
    )
    injection_flags: int = Field(
        default=0,
        description="Sessions whose answer the judge checker flagged as addressed to the grader "
        "(ape.tasks.checking.injection).",
    )
    infrastructure_errors: int = Field(
        default=0,
        description="Sessions that ended with an infrastructure error (a sandbox that would not start): "
        "left out of every score and count above; ape retry redoes them.",
    )


class PairwiseRow(ReportModel):
    """Model A against model B over the items both answered (difference is A - B)."""

    model_a: str
    model_b: str
    n_items: int
    mean_a: float | None = None
    mean_b: float | None = None
    mean_diff: float | None = None
    ci_low: float | None = Field(default=None, description="95% paired BCa bootstrap, low end.")
    ci_high: float | None = Field(default=None, description="95% paired BCa bootstrap, high end.")
    wins: int = Field(default=0, description="Items where A scored higher than B.")
    ties: int = 0
    losses: int = Field(default=0, description="Items where A scored lower than B.")
    a_only: int = Field(default=0, description="Items A passed and B failed (McNemar b).")
    b_only: int = Field(default=0, description="Items B passed and A failed (McNemar c).")
    test: Literal["exact", "chi2", "none"] = Field(
        default="none", description="McNemar variant: exact binomial, chi-square, or no test."
    )
    statistic: float | None = Field(default=None, description="Chi-square statistic, if used.")
    p_value: float | None = None
    ci_method: str | None = Field(default=None, description="bca or bca-clustered (paired).")
    correlation: float | None = Field(default=None, description="Pearson correlation of the two models' item scores.")
    mde_80: float | None = Field(default=None, description="Smallest difference this comparison detects at 80% power.")
    p_holm: float | None = Field(default=None, description="p_value after Holm's correction.")
    significant: bool = Field(default=False, description="p_holm < 0.05.")


class CalibrationBin(ReportModel):
    """One equal-width confidence bin of a reliability diagram."""

    index: int
    lower: float
    upper: float
    count: int = 0
    accuracy: float | None = None
    mean_confidence: float | None = None


class CalibrationEntry(ReportModel):
    """One model's calibration. ``missing`` counts sessions without a confidence;
    ``truncated`` the sessions cut at the token limit, left out of every number (their
    confidence is a prefix's, their miss a budget's)."""

    ece: float | None = None
    brier: float | None = None
    populated_bins: int = 0
    n: int = 0
    missing: int = 0
    truncated: int = 0
    n_bins: int = 10
    bins: list[CalibrationBin] = Field(default_factory=list)


class ChoiceMetricsEntry(ReportModel):
    """One model's log-likelihood multiple-choice accuracy by both of lm-evaluation-harness's
    rules (a ``[choices]`` run): the share of items whose gold choice has the highest
    log-likelihood (``acc``) and the highest per character (``acc_norm``), each with its 95%
    Wilson interval over items. ``metric`` is the one the session scores (and so the
    leaderboard's mean score) follow."""

    metric: str
    n_items: int
    acc: float
    acc_low: float
    acc_high: float
    acc_norm: float
    acc_norm_low: float
    acc_norm_high: float


class Summary(BaseModel):
    """Run-level facts. Callers may add their own keys (``extra_summary``), hence extra=allow."""

    model_config = ConfigDict(extra="allow")

    tasks: int = Field(default=0, description="Distinct items over all models.")
    models: int = 0
    sessions: int = 0
    wall_seconds: float | None = None
    runs_per_data: int | None = Field(default=None, description="Most sessions seen for one item.")
    sources: list[str] = Field(default_factory=list, description="The results files read.")
    generated_at: str | None = Field(default=None, description="When the report was built (UTC).")
    flagged_items: int | None = Field(
        default=None,
        description="Items the run history's item-health table flags (never passed, flaky, changed; `ape items`); "
        "null outside new runs.",
    )
    sandbox: list[str] = Field(
        default_factory=list,
        description="code_exec sandbox kinds the checks ran in (bwrap, unshare, none); empty without code_exec.",
    )
    injection_flags: int = Field(
        default=0, description="Sessions of all models whose answer the judge checker flagged as prompt injection."
    )
    infrastructure_errors: int = Field(
        default=0,
        description="Sessions of all models that ended with an infrastructure error (a sandbox that would not "
        "start), scored nowhere; ape retry redoes them.",
    )
    provenance: dict[str, Any] = Field(
        default_factory=dict,
        description="'report': the environment that built the report; 'runs': model id -> the "
        "record its run wrote to metadata.json (see ape.tasks.report.provenance).",
    )


class ErrorDetail(ReportModel):
    """Why the report (or the run behind it) failed."""

    type: str
    message: str
    details: Any = None


Verdict = Literal["regressed", "improved", "no detectable change", "not comparable"]


class RegressionRow(ReportModel):
    """One model of a run compared with earlier runs, paired item by item (``current - reference``).

    ``against = "history"``: the reference is the item's mean score over the model's runs
    since the last change point (``reference_from`` .. ``reference_run_id``, ``reference_runs``
    of them); the verdict comes from the sequential detector of :mod:`ape.tasks.stats.monitor`
    (``statistic`` against ``threshold``, see ``evidence``), whose false alarms are budgeted
    per model-year; the interval is ``mean_diff +- 1.96 se``; ``min_detectable_change`` is
    the smallest drop the *next* run would flag four times in five.
    ``against = "baseline"`` (and "previous" in histories of older versions): the exact
    McNemar test on pass/fail at ``alpha``, Holm-corrected across the run's models; the
    difference and its (bootstrap) interval are of mean item scores.
    A "no detectable change" says nothing about changes smaller than ``min_detectable_change``.
    """

    model_id: str
    run_id: str
    against: Literal["history", "previous", "baseline"]
    reference_run_id: str
    verdict: Verdict
    n_items: int = Field(default=0, description="Items both runs answered, unchanged in between.")
    mean_current: float | None = None
    mean_reference: float | None = None
    mean_diff: float | None = None
    ci_low: float | None = Field(default=None, description="95% paired bootstrap, low end.")
    ci_high: float | None = Field(default=None, description="95% paired bootstrap, high end.")
    pass_rate_diff: float | None = None
    current_only: int = Field(default=0, description="Items passed now and failed before.")
    reference_only: int = Field(default=0, description="Items passed before and failed now.")
    p_value: float | None = Field(default=None, description="Exact McNemar, two-sided.")
    alpha: float = 0.05
    min_detectable_change: float | None = None
    changed_items: int = Field(default=0, description="Items whose content changed; left out.")
    new_items: int = Field(default=0, description="Items only the current run has; left out.")
    removed_items: int = Field(default=0, description="Items only the reference run has.")
    note: str | None = Field(default=None, description="Why the comparison is partial or void.")
    truncated_share: float | None = Field(
        default=None, description="Share of this run's sessions whose answer was cut at the token limit."
    )
    reference_truncated_share: float | None = Field(
        default=None,
        description="The same share in the reference run(s); when the two differ the note says so, since "
        "a change in truncations is a change in the budget, not necessarily in ability.",
    )
    statistic: float | None = Field(default=None, description="History: the run's standardized paired difference z.")
    threshold: float | None = Field(default=None, description="History: the single-run limit L on |z|.")
    cusum_down: float | None = Field(default=None, description="History: the downward cumulative sum (before reset).")
    cusum_up: float | None = Field(default=None, description="History: the upward cumulative sum (before reset).")
    cusum_limit: float | None = Field(default=None, description="History: the limit h of the cumulative sums.")
    evidence: str | None = Field(default=None, description="What decided: the statistic against its threshold.")
    reference_from: str | None = Field(default=None, description="History: the oldest run of the reference.")
    reference_runs: int = Field(default=0, description="History: runs in the reference.")
    runs_since_change: int = Field(
        default=0, description="History: runs since the last change point, this one included."
    )
    change_point: str | None = Field(
        default=None, description="Why a new reference starts with or after this run (alarm, fingerprint, baseline)."
    )
    rescored_runs: int = Field(
        default=0,
        description="The checker changed since the reference: this many reference runs had their saved answers "
        "graded again with this run's checker (no model calls) and the comparison used those scores.",
    )
    runs_per_year: float | None = Field(
        default=None, description="History: the cadence the thresholds (L, h) were designed for."
    )
    cadence: Literal["configured", "inferred", "default"] | None = Field(
        default=None,
        description="History: where runs_per_year came from: [monitor] runs_per_year, the median spacing of the "
        "model's runs (once 5 earlier runs exist), or the nightly default before that.",
    )
    cadence_reason: str | None = Field(default=None, description="History: the cadence and why, in words.")
    flipped_items: dict[str, list[str]] = Field(
        default_factory=dict,
        description="A regressed or improved model: item ids that went 'pass->fail' and 'fail->pass' since the "
        "previous run (at most 20 each; all in the run's diff.md and diff.parquet).",
    )
    changed_settings: list[str] = Field(
        default_factory=list,
        description="A regressed or improved model: the recorded settings that differ from the previous run "
        "('fingerprint checker: a -> b', 'package pandas: 2.2 -> 2.3', ...).",
    )


# -- model-graded checks (the judge checker; ape.tasks.report.judge_agreement) ------------------------
class JudgeAgreement(ReportModel):
    """The judge against people on the calibration file's solutions."""

    n: int = Field(description="Calibration solutions the judge graded.")
    not_graded: int = Field(default=0, description="Calibration solutions the judge failed to grade.")
    accuracy: float | None = Field(default=None, description="Share of equal grades.")
    kappa: float | None = Field(default=None, description="Cohen's kappa (null when chance agreement is 1).")
    labels: list[str] = Field(default_factory=list, description="The scale, lowest first.")
    confusion: list[list[int]] = Field(
        default_factory=list, description="Rows: the people's grade, columns: the judge's (labels order)."
    )
    mean_human: float | None = Field(default=None, description="Mean of the people's scores.")
    mean_judge: float | None = Field(default=None, description="Mean of the judge's scores, same solutions.")


class JudgeModelScore(ReportModel):
    """One model's judge score beside its bias-corrected (prediction-powered) estimate."""

    model_id: str
    n_items: int
    judge_score: float | None = Field(default=None, description="Mean item score as the judge gave it.")
    judge_low: float | None = Field(default=None, description="95% CLT interval of judge_score, low end.")
    judge_high: float | None = None
    corrected_score: float | None = Field(
        default=None, description="Prediction-powered estimate: judge_score + share_judged * mean(human - judge)."
    )
    corrected_se: float | None = None
    corrected_low: float | None = Field(default=None, description="95% PPI interval, low end.")
    corrected_high: float | None = None
    share_judged: float | None = Field(default=None, description="Share of sessions the judge graded.")
    n_labels: int = Field(default=0, description="Calibration solutions behind the correction.")
    labels_from: Literal["model", "all", "none"] = Field(
        default="none", description="'model': this model's own calibration rows; 'all': every row."
    )
    judge_calls: int = Field(default=0, description="Judgements of this model's sessions (cached ones too).")
    judge_input_tokens: int | None = None
    judge_output_tokens: int | None = None
    judge_cost: float | None = Field(default=None, description="At the judge's prices; null without prices.")


class JudgeReport(ReportModel):
    """What the judge checker adds to the report."""

    judge: str = Field(description="The judge model's id.")
    method: str = "prediction-powered inference (Angelopoulos et al., Science 2023), 95% CLT interval"
    agreement: JudgeAgreement | None = Field(default=None, description="Null without a calibration file.")
    models: list[JudgeModelScore] = Field(default_factory=list)
    calibration_input_tokens: int | None = None
    calibration_output_tokens: int | None = None
    calibration_cost: float | None = None


class HealthEntry(ReportModel):
    """One model's run health (see ``ape.tasks.report.health``): its most shared non-answer signature."""

    sessions: int = Field(default=0, description="The model's sessions.")
    kind: str | None = Field(
        default=None,
        description="model error, check error, exit before tests, identical answer or identical prompt; "
        "null when no session shows a signature.",
    )
    signature: str | None = Field(default=None, description="The shared error, exit, answer or prompt.")
    count: int = Field(default=0, description="Sessions that ended with this signature.")
    share: float = Field(default=0.0, description="count / sessions.")
    suspect: bool = Field(default=False, description="share >= threshold with at least min_sessions sessions.")
    threshold: float = Field(default=0.8, description="The share that makes results suspect ([run] health_share).")
    min_sessions: int = Field(default=5, description="Fewer sessions are never suspect ([run] health_min_sessions).")
    injections: int = Field(default=0, description="Sessions whose answer was flagged as addressed to the grader.")
    injection_share: float = Field(default=0.0, description="injections / sessions.")
    injecting: bool = Field(
        default=False, description="injection_share >= injection_threshold with at least 2 flagged sessions."
    )
    injection_threshold: float = Field(default=0.1, description="The share of flagged sessions that marks a model.")
    truncated: int = Field(default=0, description="Sessions whose final answer was cut at the token limit.")
    truncated_share: float = Field(default=0.0, description="truncated / sessions.")
    truncating: bool = Field(
        default=False,
        description="truncated_share >= truncation_threshold with at least 2 cut sessions: raise [model] max_tokens.",
    )
    truncation_threshold: float = Field(default=0.1, description="The share of cut sessions that marks a model.")
    truncated_reasoning: int = Field(
        default=0,
        description="Of truncated, the sessions cut while still reasoning (no answer begun): raise [model] "
        "max_tokens or lower [model] reasoning_effort.",
    )
    limited: dict[str, int] = Field(
        default_factory=dict,
        description="Sessions that ended at a limit, per end_reason (step_limit, token_limit, "
        "sandbox_time_limit, ...); empty when none did.",
    )
    limited_share: float = Field(default=0.0, description="Sessions with any end_reason / sessions.")
    limiting: bool = Field(
        default=False,
        description="limited_share >= threshold with at least min_sessions sessions: the score measures the "
        "limits as much as the model; raise [solver] max_steps or the [sandbox] limits.",
    )


class StageChainsEntry(ReportModel):
    """One model's stage chains in the Prefect UI (its ``stage_chains.json``, ``ape.tasks.recording.server``)."""

    recorded: int = Field(default=0, description="Sessions whose render -> score chain the server was sent.")
    left_out: int = Field(
        default=0, description="Plain chains left out while the server was behind (results on disk are complete)."
    )
    record_command: str | None = Field(
        default=None, description="The command that records the chains left out; null when none were."
    )


class UnrankedRow(ReportModel):
    """A model with no result: every one of its sessions ended in an error (a dead endpoint, a
    rejected key). It is listed apart: not on the leaderboard, in no pairwise comparison,
    rank interval or tie group, since a score of 0 from errors measures nothing."""

    model_id: str
    n_items: int
    n_sessions: int = Field(description="Its sessions, every one of them ERROR.")
    error: str = Field(description="The error most of its sessions ended with (type: message).")
    error_sessions: int = Field(description="Sessions that ended with that error.")
    distinct_errors: int = Field(default=1, description="How many different errors its sessions ended with.")


class Envelope(ReportModel):
    """The whole report, as written to ``report.json``."""

    leaderboard: list[LeaderboardRow] = Field(
        default_factory=list, description="The ranked models, best first (models with no result: 'unranked')."
    )
    unranked: list[UnrankedRow] = Field(
        default_factory=list,
        description="Models whose every session errored: no result, listed apart from the leaderboard "
        "and left out of the pairwise comparisons, rank intervals and tie groups.",
    )
    pairwise: list[PairwiseRow] = Field(default_factory=list)
    calibration: dict[str, CalibrationEntry] = Field(default_factory=dict)
    summary: Summary = Field(default_factory=Summary)
    health: dict[str, HealthEntry] = Field(
        default_factory=dict, description="Model id -> run health; suspect results are not a measurement."
    )
    error: ErrorDetail | None = None
    regressions: list[RegressionRow] = Field(
        default_factory=list, description="New runs only: each model against its previous run and its pinned baseline."
    )
    judge: JudgeReport | None = Field(default=None, description="Only with the judge checker.")
    choices: dict[str, ChoiceMetricsEntry] = Field(
        default_factory=dict, description="Model id -> acc and acc_norm; [choices] (log-likelihood) runs only."
    )
    stage_chains: dict[str, StageChainsEntry] = Field(
        default_factory=dict,
        description="Model id -> its stage chains recorded in the Prefect UI and left out; "
        "empty for results without a stage_chains.json.",
    )

    @property
    def ok(self) -> bool:
        return self.error is None
