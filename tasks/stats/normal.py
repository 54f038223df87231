"""Standard normal quantiles: the one place every z of the statistics comes from.

One source, so that the same probability gives the same z in every table, threshold and
interval (the Python standard library's ``NormalDist`` and scipy's ``ndtri`` differ in the
last digits). scipy's ``ndtri`` is what ``scipy.stats.norm.ppf`` computes; it is imported
inside the function so that importing a statistics module stays cheap.
"""

from __future__ import annotations


def z_quantile(p: float) -> float:
    """The ``p`` quantile of the standard normal distribution (``z_p``, ``Phi^-1(p)``)."""
    from scipy.special import ndtri  # noqa: PLC0415 - a run imports this module before its first call; scipy waits for a z

    return float(ndtri(p))


def two_sided_z(alpha: float) -> float:
    """``z_{1 - alpha/2}``: the critical value of a two-sided test at ``alpha``, which is also
    the half-width, in standard errors, of a normal interval at level ``1 - alpha``."""
    return z_quantile(1 - alpha / 2)
