"""Coverage of APE's 95% intervals for a pass rate, by simulation.

For every true pass rate p and benchmark size n, draw many benchmarks, compute the
interval APE reports (``ape.tasks.stats.intervals.rate_interval``) and count how often it
holds p. Two designs:

- independent: n items, each passed with probability p;
- clustered: n items in clusters of ``--cluster-size`` (questions on one passage), the
  cluster's pass rate drawn from a Beta distribution with mean p and intra-cluster
  correlation ``--icc``; the interval is given the cluster labels.

For comparison it also shows the percentile bootstrap of the mean that ignores
clusters (the resampled mean of 0/1 data is exactly Binomial(n, p_hat)/n, so it is
drawn directly). Coverage has a Monte Carlo error of about 0.5 points at 2,000
replicates; a discrete pass rate also limits which coverages are attainable at all:
the ``attainable`` column gives, for independent items, the two coverages nearest
95% that any interval monotone in the count can reach.

    python benchmarks/coverage.py [--replicates 2000] [--cluster-size 3] [--icc 0.2] [--seed 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from ape.tasks.stats.intervals import rate_interval, wilson

PS = (0.5, 0.9, 0.95, 0.99)
NS = (30, 100, 1000)
LEVEL = 0.95


def attainable(p: float, n: int) -> tuple[float, float]:
    """The closest coverages below and above 95% reachable by an interval monotone in the count.

    Such an interval holds p for a run of counts around n*p, so its coverage is a sum of
    consecutive binomial probabilities containing the mode.
    """
    pmf = stats.binom.pmf(np.arange(n + 1), n, p)
    mode = int(np.argmax(pmf))
    below, above = 0.0, 1.0
    for lo in range(0, mode + 1):
        cumulative = np.cumsum(pmf[lo:])  # coverage of [lo, hi] for each hi >= lo
        for hi in range(max(mode, lo), n + 1):
            c = cumulative[hi - lo]
            if c < LEVEL:
                below = max(below, c)
            else:
                above = min(above, c)
                break
    return below, above


def exact(p: float, n: int) -> float:
    """The exact coverage of APE's interval with independent items (a sum over all counts)."""
    pmf = stats.binom.pmf(np.arange(n + 1), n, p)
    return float(sum(pmf[k] for k in range(n + 1) if wilson(k, n)[0] <= p <= wilson(k, n)[1]))


def independent(p: float, n: int, replicates: int, rng: np.random.Generator) -> tuple[float, float]:
    """(APE coverage, percentile-bootstrap coverage) with independent items."""
    counts = rng.binomial(n, p, size=replicates)
    bounds = {k: wilson(k, n) for k in np.unique(counts)}
    hits = sum(bounds[k][0] <= p <= bounds[k][1] for k in counts)
    return hits / replicates, _percentile(counts, n, p, rng)


def _percentile(counts: np.ndarray, n: int, p: float, rng: np.random.Generator) -> float:
    hits = 0
    for k in counts:
        means = rng.binomial(n, k / n, size=2000) / n
        low, high = np.quantile(means, [0.025, 0.975])
        hits += low <= p <= high
    return hits / counts.size


def clustered(
    p: float, n: int, replicates: int, rng: np.random.Generator, size: int, icc: float
) -> tuple[float, float, float]:
    """(APE coverage, percentile-bootstrap coverage, mean effective n) with clustered items."""
    groups = n // size
    labels = np.repeat(np.arange(groups), size)
    total = (1 - icc) / icc  # Beta(a, b) with a + b = (1 - icc) / icc has that correlation
    hits = naive_hits = 0
    n_eff = 0.0
    for _ in range(replicates):
        rates = rng.beta(p * total, (1 - p) * total, size=groups)
        values = (rng.random((groups, size)) < rates[:, None]).astype(float).ravel()
        interval = rate_interval(values, labels)
        hits += interval.low <= p <= interval.high
        n_eff += interval.n_effective
        k = int(values.sum())
        means = rng.binomial(n, k / n, size=2000) / n
        low, high = np.quantile(means, [0.025, 0.975])
        naive_hits += low <= p <= high
    return hits / replicates, naive_hits / replicates, n_eff / replicates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--cluster-size", type=int, default=3)
    parser.add_argument("--icc", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(
        f"95% intervals for a pass rate, {args.replicates} replicates per cell; "
        f"clustered: {args.cluster_size} items per cluster, ICC {args.icc}"
    )
    print(
        f"{'p':>5} {'n':>5} | {'indep. APE':>10} {'exact':>6} {'percentile':>10} {'attainable':>14} | "
        f"{'clust. APE':>10} {'percentile':>10} {'n_eff':>7}"
    )
    inside = total = 0
    for p in PS:
        for n in NS:
            ape_i, pct_i = independent(p, n, args.replicates, rng)
            ape_c, pct_c, n_eff = clustered(p, n, args.replicates, rng, args.cluster_size, args.icc)
            below, above = attainable(p, n)
            for value in (ape_i, ape_c):
                total += 1
                inside += 0.93 <= value <= 0.97
            print(
                f"{p:>5} {n:>5} | {ape_i:>10.3f} {exact(p, n):>6.3f} {pct_i:>10.3f} "
                f"{below:>6.3f}/{above:<7.3f} | "
                f"{ape_c:>10.3f} {pct_c:>10.3f} {n_eff:>7.1f}"
            )
    print(f"cells with APE coverage in [0.93, 0.97]: {inside} of {total} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
