"""Agreement with people and prediction-powered scores (Angelopoulos et al., Science 2023)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from ape.tasks.stats.judge_agreement import agreement, ppi_mean, raw_mean
from tests.helpers.paths import REPO_ROOT


def _simulate_coverage():
    """The coverage simulation lives with the judge's benchmark, a script, not a package."""
    spec = importlib.util.spec_from_file_location("judge_ppi", REPO_ROOT / "benchmarks" / "judge_ppi.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being built
    spec.loader.exec_module(module)
    return module.simulate_coverage


def test_agreement_equals_scikit_learn():
    sklearn_metrics = pytest.importorskip(
        "sklearn.metrics", reason="scikit-learn is not installed (pip install -e '.[dev]')"
    )
    rng = np.random.default_rng(7)
    for labels in (["FAIL", "PASS"], ["0", "1", "2", "3"]):
        human = list(rng.choice(labels, size=60))
        judge = [h if rng.random() < 0.7 else str(rng.choice(labels)) for h in human]
        ours = agreement(human, judge, labels)
        assert ours.kappa == pytest.approx(sklearn_metrics.cohen_kappa_score(human, judge, labels=labels))
        assert ours.confusion == sklearn_metrics.confusion_matrix(human, judge, labels=labels).tolist()
        assert ours.accuracy == pytest.approx(sklearn_metrics.accuracy_score(human, judge))
        assert ours.n == 60


def test_agreement_edge_cases():
    same = agreement(["PASS"] * 4, ["PASS"] * 4, ["FAIL", "PASS"])
    assert same.accuracy == 1.0 and same.kappa is None  # chance agreement is 1: kappa undefined
    with pytest.raises(ValueError, match="not on the scale"):
        agreement(["PASS"], ["MAYBE"], ["FAIL", "PASS"])


def test_ppi_mean_is_the_judge_mean_plus_the_rectifier():
    f = np.array([1, 1, 0, 1, 0, 1, 1, 1], dtype=float)  # judge on all items
    y = np.array([1, 0, 0, 1, 0], dtype=float)  # people on the labelled ones
    g = np.array([1, 1, 0, 1, 1], dtype=float)  # judge on the labelled ones
    est = ppi_mean(f, y, g)
    assert est.estimate == pytest.approx(f.mean() + (y - g).mean())
    se = np.sqrt(f.var(ddof=1) / f.size + (y - g).var(ddof=1) / y.size)
    assert est.se == pytest.approx(se)
    # the CLT interval on a bounded scale: Wilson's with the effective sample size theta(1-theta)/se^2
    n_eff = est.estimate * (1 - est.estimate) / se**2
    centre = (est.estimate + 1.959964**2 / (2 * n_eff)) / (1 + 1.959964**2 / n_eff)
    half = 1.959964 * np.sqrt(se**2 + 1.959964**2 / (4 * n_eff**2)) / (1 + 1.959964**2 / n_eff)
    assert (est.low, est.high) == pytest.approx((centre - half, centre + half), abs=1e-5)
    assert 0.0 < est.low < est.estimate < est.high < 1.0
    half = ppi_mean(f, y, g, share=0.5)
    assert half.estimate == pytest.approx(f.mean() + 0.5 * (y - g).mean())
    assert half.se is not None and half.se < est.se
    assert ppi_mean([], y, g).estimate is None


def test_ppi_interval_covers_the_truth_at_its_nominal_rate_and_the_raw_one_does_not():
    """A lenient judge (passes 25% of wrong answers, fails 5% of right ones) over 500 items,
    100 of them graded by people, true pass rate 0.6; 1,000 seeded replicates."""
    coverage = _simulate_coverage()(replicates=1000, n_items=500, n_labels=100, seed=11)
    assert 0.93 <= coverage.ppi <= 0.97, coverage
    assert coverage.raw < 0.5, coverage
    assert coverage.raw_width < coverage.ppi_width  # the raw interval is narrow and wrong


def test_raw_mean_interval():
    est = raw_mean([0.0, 1.0, 1.0, 1.0])
    # mean 0.75, se 0.25: the normal band 0.75 +- 0.49 would cross 1; the bounded one stays inside
    assert est.estimate == pytest.approx(0.75) and est.se == pytest.approx(0.25)
    assert 0.0 < est.low < 0.75 < est.high < 1.0
    assert est.high - 0.75 < 0.75 - est.low  # it leans away from the bound it is near
    assert raw_mean([1.0]).se is None
    every = raw_mean([1.0] * 20)  # no spread on the bound: Wilson's interval of 20 passes out of 20
    assert every.high == 1.0 and every.low == pytest.approx(20 / (20 + 1.959964**2), abs=1e-6)
