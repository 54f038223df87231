"""The summary chart (summary.png): scores with intervals beside a reliability diagram.

Drawn on a bare matplotlib ``Figure`` with the Agg canvas, never through pyplot, so it
works without a display and from worker threads.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ape.schemas.report import Envelope


def _draw_scores(axes, envelope: Envelope) -> None:
    rows = [row for row in envelope.leaderboard if row.mean_score is not None]
    methods = sorted({row.ci_method for row in envelope.leaderboard if row.ci_method})
    axes.set_title(f"Mean score per model (95% interval: {', '.join(methods) or 'none'})")
    if not rows:
        axes.text(0.5, 0.5, "no scored sessions", ha="center", va="center", transform=axes.transAxes)
        axes.set_axis_off()
        return
    rows = list(reversed(rows))  # best at the top
    means = [row.mean_score for row in rows if row.mean_score is not None]  # all of them: filtered above
    below = [max(0.0, mean - row.ci_low) if row.ci_low is not None else 0.0 for row, mean in zip(rows, means)]
    above = [max(0.0, row.ci_high - mean) if row.ci_high is not None else 0.0 for row, mean in zip(rows, means)]
    positions = range(len(rows))
    axes.barh(positions, means, xerr=[below, above], capsize=4, color="#4c72b0")
    axes.set_yticks(list(positions), [row.model_id for row in rows])
    axes.set_xlim(0.0, 1.1 * max(1.0, max(m + a for m, a in zip(means, above))))
    axes.set_xlabel("score")
    for position, mean in zip(positions, means):
        axes.text(mean, position, f" {mean:.3f}", va="center", ha="left", fontsize=8)


def _draw_reliability(axes, envelope: Envelope) -> None:
    axes.set_title("Reliability diagram")
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect calibration")
    drawn = False
    for model_id, entry in envelope.calibration.items():
        points = [
            (b.mean_confidence, b.accuracy)
            for b in entry.bins
            if b.count and b.mean_confidence is not None and b.accuracy is not None
        ]
        if not points:
            continue
        drawn = True
        xs, ys = zip(*points)
        label = f"{model_id} (ECE {entry.ece:.3f})" if entry.ece is not None else model_id
        axes.plot(xs, ys, marker="o", label=label)
    if not drawn:
        axes.text(0.5, 0.5, "no model reported a confidence", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlim(-0.02, 1.02)
    axes.set_ylim(-0.02, 1.02)
    axes.set_xlabel("mean reported confidence")
    axes.set_ylabel("accuracy")
    axes.legend(loc="upper left", fontsize=8)


def write_summary_chart(envelope: Envelope, path: Path) -> Path:
    """Draw the two panels for ``envelope`` into a PNG at ``path`` and return the path."""
    height = max(4.0, 0.45 * len(envelope.leaderboard) + 2.0)
    figure = Figure(figsize=(13.0, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    scores, reliability = figure.subplots(1, 2, width_ratios=[3, 2])
    _draw_scores(scores, envelope)
    _draw_reliability(reliability, envelope)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path
