"""The history as a table (``ape history``, the Prefect history artifact) and ``trend.png``.

Takes the runs table of :func:`ape.tasks.storage.history.read_runs`. The verdicts shown are the
ones recorded at run time (with the monitor's statistic, limits and sums), so the table
says what the alerts said; change points (a new reference after an alarm, a changed
fingerprint or ``ape baseline``) and the reference band (reference mean +- the single-run
limit in standard errors; a side whose limit lies beyond the scores' range [0, 1] has none:
:func:`reference_band`) come from the same columns. The chart is drawn on a bare
matplotlib ``Figure`` (Agg canvas), like :mod:`ape.tasks.report.chart`: no display needed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ape.tasks.common.inert import md_text

MARKS = {"regressed": "▼ regressed", "improved": "▲ improved", "no detectable change": "=", "not comparable": "n/c"}


def _num(value: object) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3f}"


def _verdict(verdict: object, diff: object, p: object) -> str:
    if not isinstance(verdict, str):
        return "-"
    text = MARKS.get(verdict, verdict)
    if verdict in ("regressed", "improved") and not pd.isna(diff) and not pd.isna(p):
        text += f" {diff:+.3f} (p={p:.2g})"
    return text


def _history_verdict(row: dict) -> str:
    """The verdict against the model's own history, or (older histories) against the previous run."""
    verdict = row.get("history_verdict")
    if not isinstance(verdict, str):
        old = _verdict(row.get("previous_verdict"), row.get("previous_diff"), row.get("previous_p"))
        return old if old == "-" else f"{old} (vs previous run)"
    text = MARKS.get(verdict, verdict)
    z, limit = row.get("history_z"), row.get("history_limit")
    if verdict in ("regressed", "improved") and not pd.isna(row.get("history_diff")):
        text += f" {row['history_diff']:+.3f}"
    if z is not None and not pd.isna(z) and limit is not None and not pd.isna(limit):
        text += (
            f" (z={z:+.2f}, limit ±{limit:.2f}; CUSUM ↓{row['history_cusum_down']:.2f} ↑{row['history_cusum_up']:.2f}"
        )
        text += f" vs h={row['history_h']:.2f})"
    return text


def reference_band(runs: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The single-run control limits in score units: the scores below ``reference mean - L se``
    and above ``reference mean + L se`` are the ones whose ``|z|`` passes the limit ``L``.

    Scores lie in [0, 1]. A limit beyond that range is one no run can cross: that side has no
    single-run limit, as a p chart whose computed lower control limit is negative has none
    (Montgomery, "Introduction to Statistical Quality Control", ch. 7, the control chart for
    fraction nonconforming). Such an end is null, never a score nobody can have, and never
    moved to 0 or 1 (which would claim a limit there). A band like ``0.975 [0.889, 1.061]``
    means "alarms below 0.889, no upward single-run alarm possible": shown ``[0.889, none]``.
    Why not a Wilson or logit band: this is the acceptance region of the monitor's test, not an
    interval estimate; those would put the lower limit of that example near 0.73 (the limit the
    monitor applies is 0.889), and with the monitor's floor on ``se`` (one item is at most one
    standard unit) near 0 for a reference of 0.999. The verdict is taken on the skew-corrected
    ``z`` (:mod:`ape.tasks.stats.monitor`), so next to a bound the limit it applies lies a little
    further out on the long side; the verdict column says what alarmed. Null where a run had no
    reference."""
    mean = runs["history_reference_mean"].astype(float)
    half = runs["history_limit"].astype(float) * runs["history_se"].astype(float)
    low, high = mean - half, mean + half
    return low.where(low >= 0.0), high.where(high <= 1.0)


# read under the table: its marks are compact, and a newcomer meets them on the first `ape history`
LEGEND = (
    "Reference ± limit: the score of the model's own reference runs and the scores beyond which one "
    "run alarms; `none`: no score between 0 and 1 lies beyond that side. A change point (◆) starts a "
    "new reference: after an alarm, or when a fingerprint (prompt, model, data, solver, checker) changed."
)


def _band(row: dict, low: float, high: float) -> str:
    """``reference [lower limit, upper limit]``; ``none`` for a side no score can cross."""
    mean, limit, se = row.get("history_reference_mean"), row.get("history_limit"), row.get("history_se")
    if any(v is None or pd.isna(v) for v in (mean, limit, se)):
        return "-"
    ends = ["none" if pd.isna(end) else f"{end:.3f}" for end in (low, high)]
    return f"{mean:.3f} [{ends[0]}, {ends[1]}]"


def _change(row: dict) -> str:
    change = row.get("history_change")
    if not isinstance(change, str):
        return ""
    after = " after this run" if change == "alarm" else ""
    return f"◆ new reference ({change}){after}"


def history_markdown(runs: pd.DataFrame, title: str | None = None) -> str:
    """Each model's score per run with its 95% CI, the verdicts, the reference band and change points."""
    lines = [f"# {title}", ""] if title else []
    if runs.empty:
        return "\n".join([*lines, "no runs recorded yet"]) + "\n"
    runs = runs.sort_values(["model_id", "run_id"])
    finished = runs["finished_at"].dt.strftime("%Y-%m-%d %H:%M").fillna("-")
    low, high = reference_band(runs)
    lines += [
        "| Model | Run | Finished | Items | Score [95% CI] | vs own history | Reference ± limit | Change point "
        "| vs baseline |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for when, band_low, band_high, row in zip(finished, low, high, runs.to_dict("records")):
        band = _band(row, band_low, band_high)
        lines.append(
            f"| {md_text(row['model_id'])} | {md_text(row['run_id'])} | {when} | {row['n_items']} "
            f"| {_num(row['mean_score'])} [{_num(row['ci_low'])}, {_num(row['ci_high'])}] "
            f"| {_history_verdict(row)} | {band} | {_change(row)} | "
            f"{_verdict(row.get('baseline_verdict'), row.get('baseline_diff'), row.get('baseline_p'))} |"
        )
    lines += ["", LEGEND]
    return "\n".join(lines) + "\n"


def write_trend_chart(runs: pd.DataFrame, path: Path, title: str = "Score per run") -> Path:
    """Score with its CI band over time, one line per model; regressions marked with a red ▼."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # only when drawing
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(f"{title} (95% CI; grey: reference band; dotted: change point; ▼ regression, ▲ improvement)")
    axes.set_ylabel("mean score")
    if runs.empty:
        axes.text(0.5, 0.5, "no runs recorded yet", ha="center", va="center", transform=axes.transAxes)
    for model_id, group in runs.sort_values("run_id").groupby("model_id", sort=True):
        when = pd.to_datetime(group["finished_at"].fillna(group["started_at"]))
        line = axes.plot(when, group["mean_score"], marker="o", markersize=3, label=str(model_id))[0]
        axes.fill_between(
            when,
            group["ci_low"].astype(float),
            group["ci_high"].astype(float),
            color=line.get_color(),
            alpha=0.2,
            linewidth=0,
        )
        low, high = reference_band(group)
        judged = group[["history_reference_mean", "history_limit", "history_se"]].notna().all(axis=1).to_numpy()
        if judged.any():  # a side with no limit is drawn to the end of the score range
            bottom, top = low.fillna(0.0).where(judged), high.fillna(1.0).where(judged)
            axes.fill_between(
                when,
                bottom,
                top,
                step="mid",
                color="grey",
                alpha=0.25,
                linewidth=0,
                label=f"{model_id}: reference ± limit",
            )
        for point in when[group["history_change"].isin(["alarm", "fingerprint", "baseline"]).to_numpy()]:
            axes.axvline(point, color=line.get_color(), linestyle=":", linewidth=1)
        for verdict, marker, color in (("regressed", "v", "red"), ("improved", "^", "green")):
            hit = (
                (group["history_verdict"] == verdict)
                | (group["previous_verdict"] == verdict)
                | (group["baseline_verdict"] == verdict)
            )
            if hit.any():
                axes.scatter(when[hit], group.loc[hit, "mean_score"], marker=marker, s=70, color=color, zorder=3)
    if not runs.empty:
        axes.legend(loc="lower left")
    figure.autofmt_xdate()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path
