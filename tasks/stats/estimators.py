"""Point estimates from an item's repeated samples.

pass@k is estimated per item from its ``n`` runs, ``c`` of them correct, and only then
averaged over items (:mod:`ape.tasks.stats.aggregate`), as in the HumanEval paper (Chen et
al. 2021, "Evaluating Large Language Models Trained on Code"). pass^k is its strict
sibling for agents (Yao et al. 2024, "tau-bench"): the chance that k runs drawn without
replacement from an item's n *all* pass, ``C(c, k) / C(n, k)``; it falls with k where
pass@k rises, so it shows how reliably a model repeats a success.
"""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item with ``c`` correct among ``n`` samples (HumanEval paper).

    ``1 - C(n - c, k) / C(n, k)``, computed as a product so large ``n`` stays exact enough.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k of one item: ``C(c, k) / C(n, k)``, every one of k runs passed."""
    if not 0 <= c <= n:
        raise ValueError(f"pass^k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass^k needs 1 <= k <= n, got n={n}, k={k}")
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))
