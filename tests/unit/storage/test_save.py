"""SaveHandler: durable appends, atomic metadata, crash reconciliation, redo without duplicates."""

from __future__ import annotations

import json

from ape.schemas.results import ErrorInfo, Outcome, OutputBatch, SessionResult
from ape.tasks.storage.save import SaveHandler, read_batches


def batch(item: str, outcome: Outcome = Outcome.SOLVED) -> OutputBatch:
    session = SessionResult(
        item_id=item,
        run_index=0,
        model_id="m",
        outcome=outcome,
        error=ErrorInfo(type="X", message="boom") if outcome is Outcome.ERROR else None,
    )
    return OutputBatch(item_id=item, model_id="m", sessions=[session])


def meta(tmp_path) -> dict:
    return json.loads((tmp_path / "metadata.json").read_text())


def test_save_and_resume(tmp_path):
    with SaveHandler(tmp_path, run_info={"solver_config": {"max_steps": 3}}) as saver:
        saver.load()
        saver.save([batch("a"), batch("b", Outcome.ERROR)])
        saver.save([batch("c")])
    data = meta(tmp_path)
    assert data["completed_ids"] == ["a", "b", "c"]
    assert data["errored_ids"] == ["b"]
    assert data["solver_config"] == {"max_steps": 3}
    again = SaveHandler(tmp_path)
    again.load()
    assert set(again.completed) == {"a", "b", "c"} and again.errored_ids() == ["b"]


def test_torn_line_and_lagging_metadata_are_reconciled(tmp_path):
    saver = SaveHandler(tmp_path)
    saver.load()
    saver.save([batch("a")])
    saver.close()
    # a crash after the results line reached disk but before metadata.json was updated,
    # followed by a torn write of the next item
    with (tmp_path / "results.jsonl").open("a") as handle:
        handle.write(batch("b").model_dump_json() + "\n")
        handle.write(batch("c").model_dump_json()[:40])
    (tmp_path / "metadata.json").write_text(json.dumps({"completed_ids": ["a"]}))
    saver = SaveHandler(tmp_path)
    saver.load()
    assert list(saver.completed) == ["a", "b"]
    assert meta(tmp_path)["completed_ids"] == ["a", "b"]
    assert [b.item_id for b in read_batches(tmp_path / "results.jsonl")] == ["a", "b"]
    assert (tmp_path / "results.jsonl").read_text().endswith("\n")


def test_discard_then_redo_never_duplicates(tmp_path):
    saver = SaveHandler(tmp_path)
    saver.load()
    saver.save([batch("a"), batch("b", Outcome.ERROR), batch("c")])
    assert saver.discard(saver.errored_ids()) == 1
    saver.save([batch("b")])
    saver.close()
    ids = [b.item_id for b in read_batches(tmp_path / "results.jsonl")]
    assert sorted(ids) == ["a", "b", "c"] and len(ids) == 3
    assert meta(tmp_path)["errored_ids"] == []


def test_reset_moves_old_results_aside(tmp_path):
    saver = SaveHandler(tmp_path)
    saver.load()
    saver.save([batch("a")])
    saver.close()
    fresh = SaveHandler(tmp_path)
    fresh.reset()
    assert fresh.completed == {}
    assert not (tmp_path / "results.jsonl").exists()
    assert (tmp_path / "results.jsonl.bak").is_file()
    # a second fresh start replaces that backup instead of adding another
    again = SaveHandler(tmp_path)
    again.load()
    again.save([batch("b")])
    again.close()
    SaveHandler(tmp_path).reset()
    assert [p.name for p in tmp_path.glob("results.jsonl*")] == ["results.jsonl.bak"]
    assert [b.item_id for b in read_batches(tmp_path / "results.jsonl.bak")] == ["b"]


def test_ids_with_outcomes(tmp_path):
    saver = SaveHandler(tmp_path)
    saver.load()
    saver.save([batch("a"), batch("b", Outcome.PARSING_FAILED), batch("c", Outcome.GAVE_UP)])
    assert saver.ids_with_outcomes({Outcome.PARSING_FAILED, Outcome.GAVE_UP}) == ["b", "c"]


def test_a_resumed_run_counts_the_saved_items_in_its_pass_rate(tmp_path):
    from ape.flows.progress import Tally

    passed = SessionResult(item_id="a", run_index=0, model_id="m", outcome=Outcome.SOLVED, correct=True)
    failed = passed.model_copy(update={"correct": False, "run_index": 1})
    with SaveHandler(tmp_path) as saver:
        saver.load()
        saver.save(
            [
                OutputBatch(item_id="a", model_id="m", sessions=[passed, failed]),
                OutputBatch(item_id="b", model_id="m", sessions=[passed.model_copy(update={"item_id": "b"})]),
            ]
        )
    again = SaveHandler(tmp_path)
    again.load()
    assert again.counts == {"a": (2, 1), "b": (1, 1)}
    tally = Tally(total=3)
    for item_id in ("a", "b"):
        tally.resumed(again.counts[item_id])
    assert (tally.done, tally.sessions, tally.passed) == (2, 3, 2)
    assert "2/3 items, pass 66.7%" in tally.line()
    again.discard(["a"])
    assert again.counts == {"b": (1, 1)}


def test_a_rewrite_keeps_what_it_replaced_as_one_bak(tmp_path):
    """Discarding saved items to redo them (a changed checker re-scores them all) keeps the
    file as the run found it: a redo that turns good grades into errors can be undone."""
    saver = SaveHandler(tmp_path)
    saver.load()
    saver.save([batch("a"), batch("b"), batch("c", Outcome.ERROR)])
    saver.close()
    original = (tmp_path / "results.jsonl").read_bytes()

    run = SaveHandler(tmp_path)
    run.load()  # nothing to reconcile: no rewrite, no backup
    assert not (tmp_path / "results.jsonl.bak").exists()
    assert run.discard(["a", "b", "c"]) == 3  # e.g. every item re-scored
    assert (tmp_path / "results.jsonl.bak").read_bytes() == original
    run.save([batch("a", Outcome.ERROR)])
    run.discard(["a"])  # a second rewrite in the same run keeps the first backup
    assert (tmp_path / "results.jsonl.bak").read_bytes() == original
    run.close()
    assert (tmp_path / "results.jsonl").read_text() == ""

    later = SaveHandler(tmp_path)
    later.load()
    later.save([batch("d")])
    later.discard(["d"])  # a later run's backup replaces the old one: one .bak is kept ...
    assert [b.item_id for b in read_batches(tmp_path / "results.jsonl.bak")] == ["d"]
    later.close()
    last = SaveHandler(tmp_path)
    last.load()
    last.discard(["x"])  # ... and nothing to drop rewrites nothing
    assert [b.item_id for b in read_batches(tmp_path / "results.jsonl.bak")] == ["d"]
    assert sorted(p.name for p in tmp_path.glob("results.jsonl*")) == ["results.jsonl", "results.jsonl.bak"]


def test_results_another_user_could_write_are_moved_aside_not_resumed(tmp_path, caplog):
    """results.jsonl is trusted as this user's runs' own output; one anyone may write (or a
    link to a file elsewhere) was not left by them: it is not resumed from, its items redone."""
    import os

    with SaveHandler(tmp_path) as saver:
        saver.load()
        saver.save([batch("a"), batch("b")])
    os.chmod(tmp_path / "results.jsonl", 0o666)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"completed_ids": ["a", "b"]}))
    (tmp_path / "metadata.json").unlink()
    (tmp_path / "metadata.json").symlink_to(elsewhere)
    saver = SaveHandler(tmp_path)
    assert saver.load() == {}
    assert saver.completed == {}
    assert (tmp_path / "results.jsonl.refused").exists() and (tmp_path / "metadata.json.refused").is_symlink()
    assert "group or others may write it" in caplog.text and "it is a link" in caplog.text
    saver.close()
    assert json.loads(elsewhere.read_text()) == {"completed_ids": ["a", "b"]}  # not written through the link
