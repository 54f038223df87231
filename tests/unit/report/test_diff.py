"""The run-to-run diff: flips, score changes, answers side by side, and what changed."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq

from ape.tasks.report.diff import (
    FAIL_TO_PASS,
    PASS_TO_FAIL,
    changed_settings,
    compare_items,
    diff_markdown,
    flipped_items,
    write_diff,
)


def sessions(rows: list[tuple[str, str, int, float, bool, str]]) -> pd.DataFrame:
    """(model, item, run_index, score, correct, answer) rows in the sessions-table shape."""
    return pd.DataFrame(
        [
            {
                "model_id": m,
                "item_id": i,
                "run_index": r,
                "score": s,
                "correct": c,
                "solution": json.dumps(a),
                "raw_output": a,
                "check_metadata": None if c else json.dumps({"reason": f"{a} is wrong"}),
                "error_message": None,
                "check_error_message": None,
            }
            for m, i, r, s, c, a in rows
        ]
    )


A = sessions(
    [
        ("m", "i1", 0, 1.0, True, "4"),
        ("m", "i1", 1, 1.0, True, "4"),
        ("m", "i2", 0, 0.0, False, "7"),
        ("m", "i2", 1, 0.0, False, "7"),
        ("m", "i3", 0, 0.5, True, "x"),
        ("m", "i3", 1, 1.0, True, "y"),
        ("only_a", "i1", 0, 1.0, True, "4"),
    ]
)
B = sessions(
    [
        ("m", "i1", 0, 0.0, False, "5"),
        ("m", "i1", 1, 1.0, True, "4"),
        ("m", "i2", 0, 1.0, True, "6"),
        ("m", "i2", 1, 1.0, True, "6"),
        ("m", "i3", 0, 1.0, True, "y"),
        ("m", "i3", 1, 1.0, True, "y"),
    ]
)


def test_items_are_paired_and_flips_named_by_the_half_correct_rule():
    items = compare_items(A, B).set_index("item_id")
    assert set(items["model_id"]) == {"m"}  # a model of one side only is left out
    # i1: 2/2 correct -> 1/2 correct still passes (at least half); i2 goes from 0/2 to 2/2
    assert items.loc["i1", "flip"] == "" and items.loc["i1", "change"] == -0.5
    assert items.loc["i2", "flip"] == FAIL_TO_PASS and items.loc["i2", "score_b"] == 1.0
    assert items.loc["i3", "change"] == 0.25
    assert items.loc["i2", "answer_a"] == json.dumps("7") and items.loc["i2", "reason_a"] == "7 is wrong"
    assert flipped_items(compare_items(A, B), "m") == {PASS_TO_FAIL: [], FAIL_TO_PASS: ["i2"]}
    assert flipped_items(compare_items(B, A), "m") == {PASS_TO_FAIL: ["i2"], FAIL_TO_PASS: []}


def test_changed_settings_name_each_fingerprint_and_package():
    def meta(checker: str, accuracy: float, pandas: str) -> dict:
        return {
            "model": "m",
            "runs_per_data": 2,
            "fingerprints": {"generation": {"prompt": "p", "model": "x", "data": "d"}, "checker": checker},
            "provenance": {
                "models": {"m": {"fingerprint": {"provider": "mock", "args": {"accuracy": accuracy}}}},
                "packages": {"pandas": pandas, "prefect": "3.9"},
                "sandbox": "bwrap",
            },
        }

    changes = changed_settings({"m": meta("c1", 0.6, "2.2")}, {"m": meta("c2", 0.4, "2.3")})
    assert {(c.part, c.a, c.b) for c in changes} == {
        ("fingerprint checker", "c1", "c2"),
        ("model args.accuracy", 0.6, 0.4),
        ("package pandas", "2.2", "2.3"),
    }
    assert changed_settings({"m": meta("c", 0.5, "2")}, {"m": meta("c", 0.5, "2")}) == []


def test_markdown_and_files(tmp_path):
    items = compare_items(A, B)
    text = diff_markdown(items, [], "run1", "run2")
    assert "## `m`" in text and "0 went from pass to fail, 1 from fail to pass" in text
    assert "| `i2` | fail->pass |" in text
    assert "Nothing that the runs record" in text
    md, parquet = write_diff(tmp_path, items, text)
    assert md.read_text().startswith("# Diff: run1 -> run2")
    table = pq.read_table(parquet)
    assert table.num_rows == 3 and table.schema.field("passed_a").type == "bool"
    assert table.to_pandas().set_index("item_id").loc["i2", "flip"] == FAIL_TO_PASS


def test_what_changed_never_says_nothing_when_models_or_items_differ():
    """The section used to say "Nothing that the runs record: same fingerprints ..." beside
    "The two runs hold no model in common.": it now states only what the findings support."""
    none_shared = compare_items(A[A["model_id"] == "only_a"], B)
    text = diff_markdown(none_shared, [], "a", "b")
    assert "no model in common" in text and "Nothing that the runs record" not in text
    assert "Nothing to compare" in text.split("## What changed between the runs")[1]

    fewer = B[B["item_id"] != "i3"]
    items = compare_items(A, fewer)
    text = diff_markdown(items, [], "a", "b", only_models=(["only_a"], []))
    changed = text.split("## What changed between the runs")[1]
    assert "Nothing that the runs record" not in text
    assert "- only in a: model `only_a`" in changed
    assert "- `m`: 1 items only in a, 0 only in b" in changed
    assert "Same fingerprints, sandbox, Python and package versions for the models both runs hold." in changed

    # the same models and items and no recorded change: then, and only then, "nothing"
    same = diff_markdown(compare_items(A, B), [], "a", "b")
    assert "Nothing that the runs record" in same and "only in" not in same


def test_each_sessions_verdict_is_shown_when_an_item_has_several():
    """The score is the mean of the sessions; the diff shows which session moved, not one
    answer standing for all of them."""
    errored = B.copy()
    errored.loc[(errored["item_id"] == "i3") & (errored["run_index"] == 1), "error_message"] = "timeout"
    items = compare_items(A, errored).set_index("item_id")
    assert items.loc["i1", "verdicts_a"] == "✓✓" and items.loc["i1", "verdicts_b"] == "✗✓"
    assert items.loc["i2", "verdicts_a"] == "✗✗" and items.loc["i2", "verdicts_b"] == "✓✓"
    assert items.loc["i3", "verdicts_b"] == "✓!"  # an error has no verdict
    markdown = diff_markdown(compare_items(A, errored), [], "a", "b")
    assert "| Sessions a | Sessions b |" in markdown
    assert "the answer and reason are the first session's" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| `i1`") or line.startswith("| i1"))
    assert "| ✓✓ | ✗✓ |" in row


def test_one_session_per_item_needs_no_legend():
    one = A[A["run_index"] == 0]
    markdown = diff_markdown(compare_items(one, B[B["run_index"] == 0]), [], "a", "b")
    assert "in run order" not in markdown and "| ✗ | ✓ |" in markdown
