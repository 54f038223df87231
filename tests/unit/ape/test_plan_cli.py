"""`ape plan --difference`, `ape validate --estimate` and the bad inputs of the new keys."""

from __future__ import annotations

import re

import pytest

from ape.cli import main
from ape.schemas.results import Outcome, OutputBatch, SessionResult
from tests.helpers.runner import make_benchmark

PRICED = (
    '[model]\nname = "m"\nprovider = "mock"\nargs = { behaviour = "arithmetic" }\n'
    "max_tokens = 50\nprice_input_per_mtok = 2.0\nprice_output_per_mtok = 8.0\n"
)


def _rows(out: str) -> dict[int, int]:
    """runs_per_data -> items needed, from the plan table."""
    return {
        int(m[1]): int(m[2].replace(",", "")) for m in re.finditer(r"^\s+(\d+)\s+([\d,]+)\s+[\d,]+\s+[\d.]+", out, re.M)
    }


def test_plan_without_and_with_earlier_runs(tmp_path, capsys):
    path = make_benchmark(tmp_path, n=12)
    assert main(["plan", str(path), "--difference", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "assumed (no earlier runs)" in out
    assumed = _rows(out)
    assert sorted(assumed) == [1, 2, 3, 5, 10] and assumed[1] > assumed[10]

    # earlier runs: two models that agree on most items (correlated) need far fewer items
    output = tmp_path / "out"
    for model, misses in (("a", {0, 1}), ("b", {0, 1, 2})):
        folder = output / model
        folder.mkdir(parents=True)
        with (folder / "results.jsonl").open("w") as handle:
            for i in range(12):
                ok = i not in misses
                sessions = [
                    SessionResult(
                        item_id=f"i{i}",
                        run_index=r,
                        model_id=model,
                        outcome=Outcome.SOLVED,
                        score=float(ok),
                        correct=ok,
                    )
                    for r in range(2)
                ]
                handle.write(OutputBatch(item_id=f"i{i}", model_id=model, sessions=sessions).model_dump_json() + "\n")
    assert main(["plan", str(path), "--difference", "0.05", "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "measured: a vs b on 12 shared items" in out
    assert _rows(out)[1] < assumed[1]


def test_plan_rejects_a_difference_outside_0_1(tmp_path, capsys):
    path = make_benchmark(tmp_path)
    assert main(["plan", str(path), "--difference", "3"]) == 2
    assert "--difference must be between 0 and 1" in capsys.readouterr().err


def test_validate_estimate(tmp_path, capsys):
    path = make_benchmark(tmp_path, n=4, models=PRICED, run="runs_per_data = 2\nmax_cost = 5")
    assert main(["validate", str(path), "--estimate"]) == 0
    out = capsys.readouterr().out
    # prompts "What is a + b?" of 14-15 characters: 4 tokens each, 8 sessions, 50 tokens out each
    prompts = [f"What is {i + 2} + {3 * i + 1}?" for i in range(4)]
    tokens = sum(-(-len(p) // 4) for p in prompts) * 2
    cost = (tokens * 2.0 + 400 * 8.0) / 1e6
    assert f"m: 8 sessions, {tokens} input tokens, at most 400 output tokens, cost {cost:.4f}" in out
    assert f"total: {cost:.4f} of max_cost 5" in out


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda t: t.replace('category_field = "category"', 'cluster_field = "pasage"'),
            "'pasage' is not a field of Item",
        ),
        (lambda t: t.replace("[run]", "[run]\nmax_cost = 1"), "[run] max_cost needs a price for every model"),
        (
            lambda t: t.replace('provider = "mock"', 'provider = "mock"\nprice_input_per_mtok = -1'),
            "price_input_per_mtok",
        ),
    ],
    ids=["cluster-field", "budget-without-prices", "negative-price"],
)
def test_new_keys_give_one_clear_line(tmp_path, capsys, change, expected):
    path = make_benchmark(tmp_path)
    path.write_text(change(path.read_text()))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
