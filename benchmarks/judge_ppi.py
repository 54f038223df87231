"""Coverage of the judge's corrected score (prediction-powered inference) and of its raw score.

Each replicate builds what a run leaves behind, then asks the report code for the numbers
(``ape.tasks.report.judge_agreement.judge_report``, the function ``ape run`` and ``ape report`` call):

- a sessions table of N items of one model, each truly right with probability ``p``, graded
  by a judge that passes a wrong answer with probability ``false_pass`` and fails a right
  one with ``false_fail`` (its grades are the session scores);
- a calibration set of n more answers drawn the same way, with the people's (true) grade
  and the judge's.

It counts how often the 95% intervals hold the true pass rate ``p``: the corrected one
(judge mean + mean of person - judge on the calibration set, Angelopoulos et al., Science
2023) and the raw judge mean's CLT interval, which is centred on the judge's bias.

    python benchmarks/judge_ppi.py [--replicates 1000] [--seed 0]

:func:`simulate_coverage` is the same question asked of the statistics alone
(``ppi_mean`` and ``raw_mean``, no sessions table): fast enough for the unit test
``tests/unit/stats/test_judge_agreement_stats.py``, which loads it from here.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ape.tasks.report.judge_agreement import judge_report
from ape.tasks.stats.intervals import CONFIDENCE_LEVEL
from ape.tasks.stats.judge_agreement import ppi_mean, raw_mean

# (p, false_pass, false_fail, N items, n labels)
CELLS = (
    (0.6, 0.25, 0.05, 500, 100),
    (0.6, 0.25, 0.05, 200, 50),
    (0.3, 0.10, 0.20, 500, 100),
    (0.8, 0.00, 0.00, 500, 50),  # a perfect judge: both intervals are valid
    (0.5, 0.30, 0.00, 1000, 200),
)


def replicate(rng: np.random.Generator, p: float, fp: float, fn: float, n_items: int, n_labels: int) -> tuple:
    def draw(size: int) -> tuple[np.ndarray, np.ndarray]:
        truth = rng.random(size) < p
        flip = np.where(truth, rng.random(size) < fn, rng.random(size) < fp)
        return truth.astype(float), np.where(flip, ~truth, truth).astype(float)

    _, judged = draw(n_items)
    human, judge = draw(n_labels)
    sessions = pd.DataFrame(
        {
            "model_id": "m",
            "item_id": [f"i{k}" for k in range(n_items)],
            "check_status": np.where(judged == 1.0, "PASSED", "FAILED"),
            "score": judged,
            "metric": "judge",
            "check_metadata": json.dumps({"judge": {"model": "j"}}),
        }
    )
    label = {1.0: "PASS", 0.0: "FAIL"}
    calibration = {
        "judge": "j",
        "labels": ["FAIL", "PASS"],
        "rows": [
            {"human": label[h], "judge": label[g], "human_score": h, "judge_score": g}
            for h, g in zip(human, judge, strict=True)
        ],
    }
    report = judge_report(sessions, calibration)
    assert report is not None
    row = report.models[0]
    return row.corrected_low, row.corrected_high, row.judge_low, row.judge_high


@dataclass(frozen=True)
class Coverage:
    """Share of simulated intervals that held the true mean, and their mean width."""

    ppi: float
    raw: float
    ppi_width: float
    raw_width: float


def simulate_coverage(
    *,
    replicates: int = 1000,
    n_items: int = 500,
    n_labels: int = 100,
    true_rate: float = 0.6,
    false_pass: float = 0.25,
    false_fail: float = 0.05,
    seed: int = 0,
    level: float = CONFIDENCE_LEVEL,
) -> Coverage:
    """How often :func:`ppi_mean` and :func:`raw_mean` cover the true pass rate.

    Each replicate draws N items with true pass/fail ``y ~ Bernoulli(true_rate)`` and a
    judge that passes a wrong answer with probability ``false_pass`` and fails a right one
    with ``false_fail`` (a lenient judge: its mean is biased upwards by
    ``(1 - p) false_pass - p false_fail``), plus n labelled items drawn the same way.
    """
    rng = np.random.default_rng(seed)
    hits_ppi = hits_raw = 0
    widths_ppi: list[float] = []
    widths_raw: list[float] = []

    def draw(size: int) -> tuple[np.ndarray, np.ndarray]:
        truth = (rng.random(size) < true_rate).astype(float)
        flip = np.where(truth == 1.0, rng.random(size) < false_fail, rng.random(size) < false_pass)
        return truth, np.where(flip, 1.0 - truth, truth)

    for _ in range(replicates):
        _, judged = draw(n_items)
        human, judge = draw(n_labels)
        ppi = ppi_mean(judged, human, judge, level=level)
        raw = raw_mean(judged, level=level)
        assert ppi.low is not None and ppi.high is not None and raw.low is not None and raw.high is not None
        hits_ppi += ppi.low <= true_rate <= ppi.high
        hits_raw += raw.low <= true_rate <= raw.high
        widths_ppi.append(ppi.high - ppi.low)
        widths_raw.append(raw.high - raw.low)
    return Coverage(
        ppi=hits_ppi / replicates,
        raw=hits_raw / replicates,
        ppi_width=float(np.mean(widths_ppi)),
        raw_width=float(np.mean(widths_raw)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        "| p | judge: false pass / false fail | items / labels | corrected: coverage, mean width "
        "| raw judge: coverage, mean width |"
    )
    print("|---|---|---|---|---|")
    started = time.perf_counter()
    for p, fp, fn, n_items, n_labels in CELLS:
        hits = np.zeros(2)
        widths = np.zeros(2)
        for _ in range(args.replicates):
            lo, hi, rlo, rhi = replicate(rng, p, fp, fn, n_items, n_labels)
            hits += [lo <= p <= hi, rlo <= p <= rhi]
            widths += [hi - lo, rhi - rlo]
        cov, width = hits / args.replicates, widths / args.replicates
        print(
            f"| {p} | {fp} / {fn} | {n_items} / {n_labels} | {cov[0]:.1%}, {width[0]:.3f} "
            f"| {cov[1]:.1%}, {width[1]:.3f} |"
        )
    print(f"\n{args.replicates} replicates per cell, seed {args.seed}, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
