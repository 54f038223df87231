"""New runs against a real Prefect server: a run folder each, the model called afresh (or not,
with a shared cache), the history, regressions in report.json, ``latest``, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ape.config import load_config
from tests.helpers import mock_calls
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.usefixtures("prefect_server")

N = 60


def bench(tmp_path: Path, *, run: str = "", extra: str = "") -> tuple[Path, Path]:
    accuracy = tmp_path / "accuracy.txt"
    accuracy.write_text("1.0")
    args = f'behaviour = "arithmetic", use_tools = false, accuracy_file = "{accuracy}"'
    return make_benchmark(tmp_path, n=N, model_args=args, run=run, extra=extra), accuracy


def new_run(path: Path, **overrides):
    from ape.flows.benchmark import benchmark

    config = load_config(path, overrides)
    state = benchmark(config, new_run=True, return_state=True)
    assert state.is_completed(), state
    return config, state.result()


def test_new_runs_measure_afresh_and_report_a_regression(tmp_path: Path) -> None:
    (tmp_path / "alerting.py").write_text(
        "from pathlib import Path\n"
        "def on_regression(row):\n"
        "    with open(Path(__file__).with_name('alerts.jsonl'), 'a') as f:\n"
        "        f.write(row.model_dump_json() + '\\n')\n"
    )
    path, accuracy = bench(tmp_path, extra='[hooks]\non_regression = "alerting:on_regression"')
    before = mock_calls.chat_calls("m")
    config, first = new_run(path)
    assert mock_calls.chat_calls("m") - before == N
    top = config.run.output
    folder = Path(first["output"])
    assert folder.parent == top / "runs" and folder.name == first["run_id"]
    assert (folder / "results.jsonl").is_file() and (folder / "metadata.json").is_file()
    assert not (top / "results.jsonl").exists()  # nothing written in place
    assert (top / "latest").resolve() == folder.resolve()
    report = json.loads((folder / "report.json").read_text())
    assert report["summary"]["run_id"] == first["run_id"]
    assert report["summary"]["cache_scope"] == "run"
    assert report["regressions"] == []  # nothing to compare with yet

    accuracy.write_text("0.5")
    _, second = new_run(path)
    assert mock_calls.chat_calls("m") - before == 2 * N  # every item asked again
    rows = read_results(Path(second["output"]) / "results.jsonl")
    assert not any(s["cached"] for b in rows for s in b["sessions"])
    (verdict,) = second["regressions"]
    assert verdict["verdict"] == "regressed" and verdict["against"] == "history"
    assert verdict["reference_run_id"] == first["run_id"] and verdict["reference_runs"] == 1
    assert verdict["statistic"] < -verdict["threshold"] and verdict["mean_diff"] < 0
    assert verdict["ci_high"] < 0 and "single-run limit" in verdict["evidence"]
    report = json.loads((Path(second["output"]) / "report.json").read_text())
    assert report["regressions"][0]["verdict"] == "regressed"
    # the alert explains itself: the items that flipped since the previous run, item by item
    flipped = verdict["flipped_items"]["pass->fail"]
    assert flipped and set(flipped) <= {f"i{i}" for i in range(N)} and verdict["flipped_items"]["fail->pass"] == []
    assert verdict["changed_settings"] == []  # the accuracy comes from a file: no recorded setting changed
    assert f"| `{flipped[0]}` | pass->fail |" in (Path(second["output"]) / "diff" / "m" / "diff.md").read_text()
    assert isinstance(report["summary"]["flagged_items"], int)
    assert "regressed" in (Path(second["output"]) / "leaderboard.md").read_text()
    assert (top / "latest").resolve() == Path(second["output"]).resolve()
    # the on_regression hook got the regression
    (alert,) = read_results(tmp_path / "alerts.jsonl")
    assert alert["verdict"] == "regressed" and alert["run_id"] == second["run_id"]

    runs = pd.read_parquet(top / "history" / "runs.parquet")
    assert list(runs["run_id"]) == [first["run_id"], second["run_id"]]
    assert runs["mean_score"].iloc[0] == 1.0 and runs["mean_score"].iloc[1] < 0.8
    assert runs["history_verdict"].iloc[1] == "regressed" and runs["history_change"].iloc[1] == "alarm"
    items = pd.read_parquet(top / "history" / "items")
    assert len(items) == 2 * N and set(items["run_id"]) == {first["run_id"], second["run_id"]}


def test_shared_cache_scope_reuses_generations_across_runs(tmp_path: Path) -> None:
    path, _ = bench(tmp_path, run='cache_scope = "shared"')
    before = mock_calls.chat_calls("m")
    new_run(path)
    _, second = new_run(path)
    assert mock_calls.chat_calls("m") - before == N  # the second run called no model
    report = json.loads((Path(second["output"]) / "report.json").read_text())
    assert report["summary"]["cache_scope"] == "shared"
    assert report["leaderboard"][0]["cached"] == N
    assert second["regressions"][0]["verdict"] == "no detectable change"


def test_cli_gate_history_baseline_and_retry_of_a_run(tmp_path: Path, capsys) -> None:
    from ape.cli import EXIT_REGRESSED, main

    path, accuracy = bench(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(path), "--new-run", "--fail-on-regression", "--no-server"]) == 0
    assert main(["baseline", str(out), "latest"]) == 0
    first = json.loads((out / "history" / "baseline.json").read_text())["run_id"]
    accuracy.write_text("0.6")
    assert main(["run", str(path), "--new-run", "--fail-on-regression", "--no-server"]) == EXIT_REGRESSED
    assert "regression: m against its history (1 runs up to" in capsys.readouterr().err
    accuracy.write_text("0.6")
    assert main(["run", str(path), "--new-run", "--no-server"]) == 0  # no gate: exit 0
    runs = pd.read_parquet(out / "history" / "runs.parquet")
    assert len(runs) == 3
    # the third run: the first of a new reference after the alarm, still regressed against the pinned baseline
    assert (
        runs["history_verdict"].iloc[2] == "not comparable" and runs["history_start"].iloc[2] == runs["run_id"].iloc[1]
    )
    assert runs["baseline_run"].iloc[2] == first and runs["baseline_verdict"].iloc[2] == "regressed"
    capsys.readouterr()
    assert main(["history", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("| `m` |") >= 3 and "▼ regressed" in printed
    assert "Signal/noise" in printed
    assert main(["items", str(out), "--top", "3"]) == 0
    ledger = capsys.readouterr().out
    assert "items;" in ledger and "flagged" in ledger and ledger.count("\n| `i") == 3
    assert (out / "trend.png").stat().st_size > 1000
    # `ape retry` of a run folder continues that run instead of starting a new one
    latest = (out / "latest").resolve()
    assert main(["retry", str(latest), "--no-server"]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(runs["run_id"])
    # bad input is one clear line and exit code 2
    assert main(["baseline", str(out), "20990101T000000Z-deadbeef"]) == 2
    assert "no run '20990101T000000Z-deadbeef'" in capsys.readouterr().err
    assert main(["history", str(tmp_path / "nowhere")]) == 2


def test_a_changed_checker_is_judged_on_the_re_scored_reference_without_model_calls(tmp_path: Path) -> None:
    """The checker turns strict (every answer fails): judged on the saved scores, the run would
    look like a collapse; on the reference runs' answers graded again by the new checker
    (and the pinned baseline's) it is no change, and no model is asked anything for it."""
    from ape.tasks.storage import history

    path, _ = bench(tmp_path)
    config, first = new_run(path)
    _, second = new_run(path)
    assert second["regressions"][0]["verdict"] == "no detectable change"
    history.set_baseline(config.run.output, first["run_id"])
    path.write_text(
        path.read_text().replace('implementation = "exact_match"', 'implementation = "benchschema:check_always_fails"')
    )
    shutil.rmtree(Path(second["output"]))  # its answers are gone: left out of the re-scored reference
    before = mock_calls.chat_calls("m")
    _, third = new_run(path)
    assert mock_calls.chat_calls("m") - before == N  # the new run's own items, nothing for re-scoring
    mine, pinned = third["regressions"]
    assert mine["against"] == "history" and pinned["against"] == "baseline"
    assert mine["verdict"] == "no detectable change" and mine["rescored_runs"] == 1
    assert mine["reference_run_id"] == first["run_id"]
    assert mine["mean_reference"] == 0.0 and mine["mean_current"] == 0.0
    assert "re-scored with this run's checker (no model calls)" in mine["note"]
    assert pinned["verdict"] == "no detectable change" and pinned["rescored_runs"] == 1 and pinned["n_items"] == N
    runs = history.read_runs(config.run.output)
    assert runs["history_change"].iloc[-1] == "fingerprint"  # the new checker starts a new reference
    assert runs["mean_score"].iloc[0] == 1.0  # the history keeps the scores as recorded


def test_with_rescoring_off_a_changed_checker_is_judged_by_the_single_run_limit(tmp_path: Path) -> None:
    path, _ = bench(tmp_path, extra="[monitor]\nrescore_runs = 0")
    new_run(path)
    path.write_text(
        path.read_text().replace('implementation = "exact_match"', 'implementation = "benchschema:check_always_fails"')
    )
    _, second = new_run(path)
    (verdict,) = second["regressions"]
    assert verdict["rescored_runs"] == 0 and verdict["verdict"] == "regressed"
    assert "checker changed: judged against the old reference by the single-run limit" in verdict["note"]


def test_in_place_runs_keep_the_seeds_behaviour(tmp_path: Path) -> None:
    from ape.flows.benchmark import benchmark

    path, _ = bench(tmp_path)
    config = load_config(path)
    state = benchmark(config, return_state=True)
    assert state.is_completed()
    assert (config.run.output / "results.jsonl").is_file()
    assert not (config.run.output / "runs").exists() and not (config.run.output / "history").exists()
    report = json.loads((config.run.output / "report.json").read_text())
    assert report["summary"]["cache_scope"] == "in-place" and "run_id" not in report["summary"]
    assert report["regressions"] == []


def test_thirty_nightly_runs_of_an_unchanged_sampled_model_stay_quiet_then_a_drop_exits_3(
    tmp_path: Path, capsys
) -> None:
    """`ape run --new-run` 31 times: a sampled mock model whose answers vary between runs
    (a fresh seed per run, four items in five consistent), judged against its own history at a
    nightly cadence; no alarm while it is unchanged, then a drop is a regression and exit 3."""
    from ape.cli import EXIT_REGRESSED, main

    n = 40
    seed = tmp_path / "seed.txt"
    accuracy = tmp_path / "accuracy.txt"
    accuracy.write_text("0.9")
    args = (
        f'behaviour = "arithmetic", use_tools = false, sampling = true, consistency = 0.8, '
        f'accuracy_file = "{accuracy}", seed_file = "{seed}"'
    )
    path = make_benchmark(
        tmp_path, n=n, model_args=args, run="solver_workers = 1", extra="[monitor]\nruns_per_year = 365"
    )
    out = tmp_path / "out"
    for night in range(30):
        seed.write_text(str(1000 + night))
        assert main(["run", str(path), "--new-run", "--fail-on-regression", "--no-server", "--no-progress"]) == 0
    runs = pd.read_parquet(out / "history" / "runs.parquet").sort_values("run_id")
    assert runs["mean_score"].nunique() > 1  # the runs differ, like a sampled model's
    assert (runs["history_verdict"].iloc[1:] == "no detectable change").all()
    assert runs["history_reference_runs"].iloc[-1] == 29 and runs["history_change"].iloc[1:].isna().all()
    capsys.readouterr()
    seed.write_text("2000")
    accuracy.write_text("0.4")
    assert (
        main(["run", str(path), "--new-run", "--fail-on-regression", "--no-server", "--no-progress"]) == EXIT_REGRESSED
    )
    assert "regression: m against its history (30 runs up to" in capsys.readouterr().err
    report = json.loads(((out / "latest") / "report.json").read_text())
    (verdict,) = report["regressions"]
    assert verdict["verdict"] == "regressed" and verdict["ci_high"] < 0 and verdict["runs_since_change"] == 31


# 10 runs a night apart, 10 an hour apart, then minutes apart (the drop's runs too)
SCHEDULE = [pd.Timedelta(days=1)] * 10 + [pd.Timedelta(hours=1)] * 10 + [pd.Timedelta(minutes=7)] * 12


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("unit", ["us", "ns"])
def test_the_default_monitor_infers_the_cadence_from_nightly_hourly_and_minutes_apart_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unit: str
) -> None:
    """`ape run --new-run --fail-on-regression` 30 times with the default `[monitor]` (no
    runs_per_year): a sampled mock model whose answers vary between runs, its runs finishing
    a night, then an hour, then minutes apart (the clock the run records its finish with, set
    by the test), the history's times read back at microsecond (pandas 3) or nanosecond
    (pandas 2) resolution. The cadence is the nightly default until 5 earlier runs exist,
    then the median spacing of the last 30 runs; no alarm while the model is unchanged; a
    drop alarms within two runs. (At the nightly cadence 1 false alarm per model-year is a
    few percent of such histories; the mock's draws are seeded, so the outcome is fixed.)"""
    from ape.cli import EXIT_REGRESSED, main
    from ape.tasks.after_run import join_history
    from ape.tasks.stats.monitor import DEFAULT_RUNS_PER_YEAR, MAX_RUNS_PER_YEAR, MIN_EARLIER_RUNS
    from ape.tasks.storage import history

    read_runs = history.read_runs

    def at_resolution(top: Path, columns: list[str] | None = None) -> pd.DataFrame:
        runs = read_runs(top, columns)
        stamps = [c for c in ("started_at", "finished_at") if c in runs.columns]
        return runs.astype({c: f"datetime64[{unit}, UTC]" for c in stamps})

    moments = iter(pd.Timestamp("2026-03-01 03:00", tz="UTC") + pd.Series(SCHEDULE).cumsum())
    monkeypatch.setattr(history, "read_runs", at_resolution)
    monkeypatch.setattr(join_history, "clock", lambda: next(moments))
    seed, accuracy = tmp_path / "seed.txt", tmp_path / "accuracy.txt"
    accuracy.write_text("0.9")
    args = (
        f'behaviour = "arithmetic", use_tools = false, sampling = true, consistency = 0.8, '
        f'accuracy_file = "{accuracy}", seed_file = "{seed}"'
    )
    path = make_benchmark(tmp_path, n=20, model_args=args, run="solver_workers = 1\nstage_runs = false")
    out = tmp_path / "out"
    command = ["run", str(path), "--new-run", "--fail-on-regression", "--no-server", "--no-progress"]
    for night in range(30):
        seed.write_text(str(1000 + night))
        assert main(command) == 0, night
    runs = read_runs(out).sort_values("run_id")
    assert runs["mean_score"].nunique() > 1  # the runs differ, like a sampled model's
    assert runs["finished_at"].diff().iloc[1:].tolist() == SCHEDULE[1:30]  # the times went through the history
    assert (runs["history_verdict"].iloc[1:] == "no detectable change").all()
    assert runs["history_change"].iloc[1:].isna().all() and runs["history_reference_runs"].iloc[-1] == 29
    # the cadence: the default for 0 to 4 earlier runs, then the median gap: nightly while most
    # gaps are nights, the mean of a night and an hour when they are even, then hourly (the cap)
    cadences = runs["history_runs_per_year"].tolist()
    year = 365.25 * 86400
    assert cadences[:MIN_EARLIER_RUNS] == [DEFAULT_RUNS_PER_YEAR] * MIN_EARLIER_RUNS
    assert cadences[MIN_EARLIER_RUNS:18] == pytest.approx([year / 86400] * (18 - MIN_EARLIER_RUNS))
    assert cadences[18] == pytest.approx(year / ((86400 + 3600) / 2))
    assert cadences[19:] == [MAX_RUNS_PER_YEAR] * 11
    assert "4 earlier runs, fewer than the 5" in runs["history_note"].iloc[MIN_EARLIER_RUNS - 1]
    report = json.loads((out / "latest" / "report.json").read_text())
    (verdict,) = report["regressions"]
    assert verdict["cadence"] == "inferred" and verdict["runs_per_year"] == MAX_RUNS_PER_YEAR
    assert "capped at hourly" in verdict["cadence_reason"] and "default" not in (verdict["note"] or "")
    # the drop: an alarm (exit 3) in the first or second run after it
    accuracy.write_text("0.5")
    codes = []
    for night in (30, 31):
        seed.write_text(str(1000 + night))
        codes.append(main(command))
        if codes[-1] == EXIT_REGRESSED:
            break
    assert codes[-1] == EXIT_REGRESSED, codes
    assert read_runs(out).sort_values("run_id")["history_verdict"].iloc[-1] == "regressed"


def test_a_new_run_after_a_changed_model_is_not_refused_for_the_in_place_results(tmp_path: Path) -> None:
    """In-place results of an older model setting are not what a new run resumes (it writes its
    own run folder), so `ape run --new-run` and a served run go ahead; an in-place rerun is refused."""
    from ape.cli import main

    path, _ = bench(tmp_path)
    assert main(["run", str(path), "--no-server", "--no-progress"]) == 0
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('behaviour = "arithmetic"', 'behaviour = "arithmetic", seed = 7'), encoding="utf-8")
    assert path.read_text(encoding="utf-8") != text
    assert main(["run", str(path), "--no-server", "--no-progress"]) == 2  # in place: would mix
    assert main(["run", str(path), "--no-server", "--no-progress", "--new-run"]) == 0
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 1
