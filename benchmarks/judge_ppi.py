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
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd

from ape.tasks.report.judge_agreement import judge_report

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
