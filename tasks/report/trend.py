"""The history as a table (``ape history``, the Prefect history artifact) and ``trend.png``.

Takes the runs table of :func:`ape.tasks.storage.history.read_runs`. The chart is drawn on a bare
matplotlib ``Figure`` (Agg canvas), like :mod:`ape.tasks.report.chart`: no display needed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

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


def history_markdown(runs: pd.DataFrame, title: str | None = None) -> str:
    """Each model's score per run with its 95% CI and the verdicts, as a markdown table."""
    lines = [f"# {title}", ""] if title else []
    if runs.empty:
        return "\n".join([*lines, "no runs recorded yet"]) + "\n"
    runs = runs.sort_values(["model_id", "run_id"])
    finished = runs["finished_at"].dt.strftime("%Y-%m-%d %H:%M").fillna("-")
    columns = [
        runs[c].tolist()
        for c in (
            "model_id",
            "run_id",
            "n_items",
            "mean_score",
            "ci_low",
            "ci_high",
            "previous_verdict",
            "previous_diff",
            "previous_p",
            "baseline_verdict",
            "baseline_diff",
            "baseline_p",
        )
    ]
    lines += [
        "| Model | Run | Finished | Items | Score [95% CI] | vs previous | vs baseline |",
        "|---|---|---|---|---|---|---|",
    ]
    for when, (model, run, n, mean, low, high, pv, pd_, pp, bv, bd, bp) in zip(finished, zip(*columns)):
        lines.append(
            f"| {model} | {run} | {when} | {n} | {_num(mean)} [{_num(low)}, {_num(high)}] | "
            f"{_verdict(pv, pd_, pp)} | {_verdict(bv, bd, bp)} |"
        )
    return "\n".join(lines) + "\n"


def write_trend_chart(runs: pd.DataFrame, path: Path, title: str = "Score per run") -> Path:
    """Score with its CI band over time, one line per model; regressions marked with a red ▼."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # only when drawing
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_title(f"{title} (95% CI; ▼ regression, ▲ improvement)")
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
        for verdict, marker, color in (("regressed", "v", "red"), ("improved", "^", "green")):
            hit = (group["previous_verdict"] == verdict) | (group["baseline_verdict"] == verdict)
            if hit.any():
                axes.scatter(when[hit], group.loc[hit, "mean_score"], marker=marker, s=70, color=color, zorder=3)
    if not runs.empty:
        axes.legend(loc="lower left")
    figure.autofmt_xdate()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path
