"""Run ids, run folders and ``latest``; the Parquet history and its crash safety; the paired
regression verdicts; the history table and trend chart. No Prefect needed."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.tasks.report.trend import history_markdown, write_trend_chart
from ape.tasks.stats.regression import compare, fewest_significant_flips, min_detectable_change
from ape.tasks.storage import history, runs


def config(out: Path, scope: str = "run") -> ApeConfig:
    return ApeConfig(
        data={"file": "d.jsonl", "schema": "m:Item"},
        prompt={"template": "{{ q }}"},
        model={"provider": "mock"},
        checker={"implementation": "exact_match"},
        run={"output": str(out), "cache_scope": scope},
    )


# ------------------------------------------------------------------ runs


def test_run_id_is_time_then_the_random_tail_of_the_flow_run_id() -> None:
    when = datetime(2026, 1, 30, 3, 0, 5, tzinfo=UTC)
    # two UUIDv7 flow run ids made in the same millisecond share their leading digits
    a = runs.make_run_id("01a229ba-5666-7655-b271-ace5adbe5f8f", when)
    b = runs.make_run_id("01a229ba-5667-758a-be13-52d29a0f8b74", when)
    assert a == "20260130T030005Z-adbe5f8f" and a != b
    assert runs.check_run_id(a) == a
    with pytest.raises(ApeError, match="not a run id"):
        runs.check_run_id("../etc")


def test_a_flow_run_retry_continues_its_run_and_scopes_follow_the_folder(tmp_path: Path) -> None:
    cfg = config(tmp_path / "out")
    assert runs.cache_scope_key(cfg) == runs.IN_PLACE
    info = runs.start_run(cfg, flow_run_id="01a229ba-5666-7655-b271-ace5adbe5f8f")
    again = runs.start_run(cfg, flow_run_id="01a229ba-5666-7655-b271-ace5adbe5f8f")
    assert again == info  # same flow run (a Prefect retry): same run
    other = runs.start_run(cfg, flow_run_id="01a229ba-5667-758a-be13-52d29a0f8b74")
    assert other.run_id != info.run_id
    inner = runs.config_for_run(cfg, info)
    assert inner.run.output == tmp_path / "out" / "runs" / info.run_id
    assert runs.cache_scope_key(inner) == info.run_id
    assert runs.cache_dir(inner) == inner.run.output / ".cache"
    shared = runs.config_for_run(config(tmp_path / "out", "shared"), info)
    assert runs.cache_scope_key(shared) == "shared" and runs.cache_dir(shared) == tmp_path / "out" / ".cache"
    assert runs.start_run(cfg, flow_run_id=None, run_id=info.run_id) == info  # `ape retry` of a run
    with pytest.raises(ApeError, match="no run"):
        runs.start_run(cfg, flow_run_id=None, run_id="20990101T000000Z-00000000")
    assert runs.split_run_folder(inner.run.output) == (tmp_path / "out", info.run_id)
    assert runs.split_run_folder(tmp_path / "out") == (tmp_path / "out", None)


def test_latest_points_at_the_newest_finished_run(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    old = runs.start_run(cfg, flow_run_id="00000000-0000-7000-8000-000000000001")
    new = old.model_copy(update={"run_id": "29990101T000000Z-00000002"})
    runs.run_folder(tmp_path, new.run_id).mkdir(parents=True)
    runs.write_info(runs.run_folder(tmp_path, new.run_id), new)
    runs.finish_run(tmp_path, new)
    runs.finish_run(tmp_path, old)  # an older run finishing late does not take ``latest``
    assert os.readlink(tmp_path / "latest") == f"runs/{new.run_id}"
    assert runs.read_info(tmp_path / "latest").status == "finished"
    assert runs.split_run_folder(tmp_path / "latest") == (tmp_path, new.run_id)


# ------------------------------------------------------------------ history


def items(passed: list[bool], hashes: list[str] | None = None, model: str = "m") -> pd.DataFrame:
    n = len(passed)
    return pd.DataFrame(
        {
            "model_id": model,
            "item_id": [f"i{i}" for i in range(n)],
            "item_hash": hashes or ["h"] * n,
            "score": np.array(passed, float),
            "passed": passed,
            "n": 1,
            "c": np.array(passed, int),
        }
    )


def summary(model: str = "m", **extra) -> dict:
    return {
        "model_id": model,
        "benchmark": "b",
        "n_items": 3,
        "mean_score": 0.5,
        "checker_fingerprint": "k",
        "config_fingerprint": "c",
        **extra,
    }


def test_history_appends_once_and_survives_a_crash_between_its_files(tmp_path: Path) -> None:
    history.append_run(tmp_path, "20260101T000000Z-00000001", [summary()], items([True, False, True]))
    # recording the same run again replaces it
    history.append_run(tmp_path, "20260101T000000Z-00000001", [summary(mean_score=0.7)], items([True] * 3))
    # a crash after the items file but before the summary: the run is not in the history
    crashed = "20260102T000000Z-00000002"
    history._write_atomically(
        __import__("pyarrow").Table.from_pandas(
            items([False] * 3).assign(run_id=crashed)[history.ITEMS_SCHEMA.names],
            schema=history.ITEMS_SCHEMA,
            preserve_index=False,
        ),
        history.history_dir(tmp_path) / history.ITEMS / f"{crashed}.parquet",
    )
    (history.history_dir(tmp_path) / ".runs.123.tmp").write_bytes(b"half a file")  # a torn write
    table = history.read_runs(tmp_path)
    assert list(table["run_id"]) == ["20260101T000000Z-00000001"] and table["mean_score"].iloc[0] == 0.7
    history.append_run(tmp_path, "20260103T000000Z-00000003", [summary()], items([True] * 3))
    # plain pandas reads it; the crashed run's items were cleared by the next recorded run
    assert pd.read_parquet(tmp_path / "history" / "runs.parquet")["run_id"].tolist() == [
        "20260101T000000Z-00000001",
        "20260103T000000Z-00000003",
    ]
    assert sorted(set(pd.read_parquet(tmp_path / "history" / "items")["run_id"])) == [
        "20260101T000000Z-00000001",
        "20260103T000000Z-00000003",
    ]
    assert history.previous_run(tmp_path, "m", "20260103T000000Z-00000003")["run_id"] == "20260101T000000Z-00000001"
    assert history.previous_run(tmp_path, "other", "20260103T000000Z-00000003") is None
    assert history.set_baseline(tmp_path, "latest") == "20260103T000000Z-00000003"
    assert history.baseline(tmp_path) == "20260103T000000Z-00000003"
    with pytest.raises(ApeError, match="no run 'nope'"):
        history.set_baseline(tmp_path, "nope")


# ------------------------------------------------------------------ regression verdicts


def test_a_drop_is_a_regression_a_rise_an_improvement_and_noise_neither() -> None:
    rng = np.random.default_rng(5)
    before = rng.random(500) < 0.9
    after = before.copy()
    after[np.flatnonzero(before)[:40]] = False  # 40 items now fail
    row = compare(
        items(list(after)), items(list(before)), model_id="m", run_id="b", reference_run_id="a", against="previous"
    )
    assert row.verdict == "regressed" and row.reference_only == 40 and row.current_only == 0
    assert row.p_value < 1e-9 and row.ci_high < 0 and row.n_items == 500
    assert row.pass_rate_diff == pytest.approx(-40 / 500)
    up = compare(
        items(list(before)), items(list(after)), model_id="m", run_id="b", reference_run_id="a", against="baseline"
    )
    assert up.verdict == "improved"
    few = before.copy()
    few[np.flatnonzero(before)[:3]] = False
    small = compare(
        items(list(few)), items(list(before)), model_id="m", run_id="b", reference_run_id="a", against="previous"
    )
    assert small.verdict == "no detectable change" and small.min_detectable_change > 3 / 500


def test_changed_items_are_left_out_and_a_changed_checker_voids_the_comparison() -> None:
    now = items([False, False, True, True], hashes=["x", "h", "h", "h"])
    then = items([True, True, True], hashes=["h", "h", "h"])
    row = compare(now, then, model_id="m", run_id="b", reference_run_id="a", against="previous", config_changed=True)
    assert row.n_items == 2 and row.changed_items == 1 and row.new_items == 1 and row.removed_items == 0
    assert "2 unchanged items" in row.note and "prompt or model settings changed" in row.note
    void = compare(now, then, model_id="m", run_id="b", reference_run_id="a", against="previous", checker_changed=True)
    assert void.verdict == "not comparable" and "checker changed" in void.note


def test_minimum_detectable_change_shrinks_with_items_and_never_below_the_exact_test_floor() -> None:
    assert fewest_significant_flips() == 6  # 6 flips one way, none back: p = 2/64 < 0.05
    rng = np.random.default_rng(0)
    noisy = lambda n: (rng.random(n) < 0.2).astype(float) - (rng.random(n) < 0.2).astype(float)  # noqa: E731
    assert min_detectable_change(noisy(2000)) < min_detectable_change(noisy(200))
    assert min_detectable_change(np.zeros(100)) == pytest.approx(6 / 100)


# ------------------------------------------------------------------ table and chart


def test_history_table_and_trend_chart(tmp_path: Path) -> None:
    assert "no runs recorded yet" in history_markdown(history.read_runs(tmp_path))
    history.append_run(
        tmp_path,
        "20260101T000000Z-00000001",
        [summary(ci_low=0.4, ci_high=0.6, finished_at=pd.Timestamp("2026-01-01", tz="UTC"))],
        items([True]),
    )
    history.append_run(
        tmp_path,
        "20260102T000000Z-00000002",
        [
            summary(
                mean_score=0.2,
                ci_low=0.1,
                ci_high=0.3,
                previous_verdict="regressed",
                previous_diff=-0.3,
                previous_p=0.001,
                finished_at=pd.Timestamp("2026-01-02", tz="UTC"),
            )
        ],
        items([False]),
    )
    table = history_markdown(history.read_runs(tmp_path), "b: history")
    assert (
        "| `m` | `20260102T000000Z-00000002` | 2026-01-02 00:00 | 3 | 0.200 [0.100, 0.300] | ▼ regressed -0.300"
        in table
    )
    path = write_trend_chart(history.read_runs(tmp_path), tmp_path / "trend.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
