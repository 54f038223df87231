"""Coverage of the 95% interval APE reports for pass^k, by simulation through ``aggregate``.

pass^k is the share of items whose k runs all pass (every run right: the reliability an
agent needs), estimated per item without bias as C(c, k) / C(n, k) and averaged over items
(Yao et al., "tau-bench", 2024). Its interval is the one APE gives any per-item mean
(``ape.tasks.stats.aggregate``: the item scores' interval over items). Each replicate draws
a benchmark: ``n`` items whose per-run pass probabilities come from a Beta distribution
with the given mean, ``runs`` runs each; the sessions table goes through
``ape.tasks.stats.aggregate.aggregate``, as a report's does, and the interval is checked
against the true pass^k of that item population, E[p^k].

    python benchmarks/pass_hat_k_coverage.py [--replicates 1000] [--seed 1]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from scipy import special

from ape.tasks.stats.aggregate import aggregate

MEANS = (0.5, 0.8)
NS = (30, 100)
RUNS = 4
K = 2
CONCENTRATION = 4.0  # Beta(a, b) with a + b = 4: items differ a good deal in difficulty


def true_pass_hat_k(mean: float, k: int) -> float:
    """E[p^k] for p ~ Beta(a, b): prod_{i<k} (a + i) / (a + b + i)."""
    a, b = mean * CONCENTRATION, (1 - mean) * CONCENTRATION
    return float(
        np.exp(special.gammaln(a + k) - special.gammaln(a) + special.gammaln(a + b) - special.gammaln(a + b + k))
    )


def sessions_for(rng: np.random.Generator, mean: float, n: int) -> pd.DataFrame:
    a, b = mean * CONCENTRATION, (1 - mean) * CONCENTRATION
    p = rng.beta(a, b, size=n)
    passed = rng.random((n, RUNS)) < p[:, None]
    items = np.repeat([f"q{i}" for i in range(n)], RUNS)
    correct = passed.ravel()
    return pd.DataFrame(
        {
            "model_id": "m",
            "item_id": items,
            "run_index": np.tile(np.arange(RUNS), n),
            "score": correct.astype(float),
            "correct": correct,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        f"pass^{K} from {RUNS} runs per item, Beta items (a + b = {CONCENTRATION:g}), "
        f"{args.replicates} replicates, seed {args.seed}"
    )
    print("| mean pass rate | items | true pass^k | coverage | mean width |")
    print("|---|---|---|---|---|")
    for mean in MEANS:
        truth = true_pass_hat_k(mean, K)
        for n in NS:
            held, widths = 0, []
            for _ in range(args.replicates):
                row = aggregate(sessions_for(rng, mean, n)).iloc[0]
                low, high = row[f"pass^{K}_low"], row[f"pass^{K}_high"]
                held += low <= truth <= high
                widths.append(high - low)
            print(f"| {mean:.2f} | {n} | {truth:.3f} | {held / args.replicates:.3f} | {np.mean(widths):.3f} |")


if __name__ == "__main__":
    main()
