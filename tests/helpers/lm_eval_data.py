"""Small local data sets in the shapes of lm-evaluation-harness's GSM8K, MMLU subjects, ARC and
HellaSwag (no network), the answers a model might give to them, and a harness model object that
returns those answers, for the tests that run harness tasks through APE."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def needs_lm_eval() -> Any:
    """The ``lm_eval`` package, or the test skips saying so."""
    return pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (pip install -e '.[lm_eval]')")


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Hub look-ups: the tests' data sets are local files."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def gsm8k_rows(count: int, start: int = 1) -> list[dict[str, Any]]:
    """Word problems with GSM8K's fields: the answer's reasoning, then ``#### N``."""
    rows = []
    for i in range(start, start + count):
        total = i * 3 + 1
        rows.append(
            {
                "question": f"Ann has {i} boxes of 3 pens and 1 loose pen. How many pens does she have?",
                "answer": f"She has {i} * 3 = {i * 3} pens in boxes.\n{i * 3} + 1 = {total}\n#### {total:,}",
            }
        )
    return rows


def write_gsm8k(folder: Path, test: int = 6, train: int = 8) -> dict[str, str]:
    """``train.jsonl`` and ``test.jsonl`` under ``folder``; the data_files table (relative names)."""
    _write_jsonl(folder / "gsm8k" / "train.jsonl", gsm8k_rows(train, start=100))
    _write_jsonl(folder / "gsm8k" / "test.jsonl", gsm8k_rows(test, start=1))
    return {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"}


def gsm8k_answers(test: int = 6) -> dict[int, str]:
    """Answers by doc id: right in the strict format, right only to the flexible filter, wrong,
    and one that runs on past a stop sequence (cut there, as the harness cuts it)."""
    answers = {}
    for doc_id, row in enumerate(gsm8k_rows(test, start=1)):
        total = row["answer"].rsplit("#### ", 1)[1]
        answers[doc_id] = [
            f"Three times {doc_id + 1} plus one.\n#### {total}",
            f"The answer is {total}.",
            "#### 7",
            f"So it is {total}.\n\nQuestion: and then?\nAnswer: #### 999",
            f"#### {total}.",
            "I do not know.",
        ][doc_id % 6]
    return answers


MMLU_SUBJECT = "abstract_algebra"


def mmlu_rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Questions with MMLU's fields (question, subject, choices, answer as an index)."""
    return [
        {
            "question": f"Find the order of the element {i} in Z_{i + 5}.",
            "subject": MMLU_SUBJECT,
            "choices": [str(i + 1), str(i + 5), str(2 * i + 3), "infinite"],
            "answer": i % 4,
        }
        for i in range(start, start + count)
    ]


def write_mmlu(folder: Path, test: int = 8, dev: int = 5) -> dict[str, str]:
    _write_jsonl(folder / "mmlu" / "dev.jsonl", mmlu_rows(dev, start=50))
    _write_jsonl(folder / "mmlu" / "test.jsonl", mmlu_rows(test))
    return {"dev": "mmlu/dev.jsonl", "test": "mmlu/test.jsonl"}


def mmlu_answers(test: int = 8) -> dict[int, str]:
    letters = "ABCD"
    return {
        doc_id: [f"{letters[row['answer']]}", f" {letters[row['answer']]}. x\nmore", "B", "(C)"][doc_id % 4]
        for doc_id, row in enumerate(mmlu_rows(test))
    }


def arc_rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Science questions with ARC's fields: choices as texts and labels, ``answerKey`` a label
    (some questions lettered 1-4, as a few of ARC's are)."""
    rows = []
    for i in range(start, start + count):
        labels = ["1", "2", "3", "4"] if i % 5 == 4 else ["A", "B", "C", "D"]
        texts = [f"{i + 2} degrees", "the sun warms it", f"water boils at {i} metres", "a plant needs light"]
        rows.append(
            {
                "id": f"Mercury_{i}",
                "question": f"Which statement about sample {i} is true?",
                "choices": {"text": texts[: 3 + i % 2], "label": labels[: 3 + i % 2]},
                "answerKey": labels[i % 3],
            }
        )
    return rows


def write_arc(folder: Path, test: int = 8, train: int = 4) -> dict[str, str]:
    _write_jsonl(folder / "arc" / "train.jsonl", arc_rows(train, start=40))
    _write_jsonl(folder / "arc" / "test.jsonl", arc_rows(test))
    return {"train": "arc/train.jsonl", "test": "arc/test.jsonl"}


def hellaswag_rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Sentence endings with HellaSwag's fields (``label`` a string, WikiHow's bracket marks)."""
    return [
        {
            "ind": i,
            "activity_label": "Cleaning windows" if i % 2 else "Baking bread",
            "ctx_a": f"A person holds a cloth near window {i}.",
            "ctx_b": "they",
            "ctx": f"A person holds a cloth near window {i}. they",
            "endings": [
                "wipe the glass in slow circles.",
                f"[header] eat {i} apples at once.",
                "fly over the house.",
                "sing the window a song about rain.",
            ],
            "source_id": f"src~{i}",
            "split": "val",
            "split_type": "indomain",
            "label": str(i % 4),
        }
        for i in range(start, start + count)
    ]


def write_hellaswag(folder: Path, validation: int = 8, train: int = 4) -> dict[str, str]:
    _write_jsonl(folder / "hellaswag" / "train.jsonl", hellaswag_rows(train, start=60))
    _write_jsonl(folder / "hellaswag" / "validation.jsonl", hellaswag_rows(validation))
    return {"train": "hellaswag/train.jsonl", "validation": "hellaswag/validation.jsonl"}


def lambada_rows(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Passages in LAMBADA's one field (``text``), whose last word the model is to predict."""
    words = ["door", "garden", "letter", "river", "window", "kitchen", "morning", "answer"]
    return [
        {"text": f"She walked past house {i} and opened the old wooden {words[i % 8]}. He looked at the {words[i % 8]}"}
        for i in range(start, start + count)
    ]


def write_lambada(folder: Path, test: int = 8) -> dict[str, str]:
    _write_jsonl(folder / "lambada" / "test.jsonl", lambada_rows(test))
    return {"test": "lambada/test.jsonl"}


def replay_lm(answer: Callable[[Any], str], prompts: list[str]) -> Any:
    """A harness model object answering each ``generate_until`` request with ``answer(request)``
    (the stop sequences applied, as the harness's own back ends apply them) and noting its prompt."""
    from lm_eval.api.model import LM

    class Replay(LM):
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            out = []
            for request in requests:
                context, kwargs = request.args
                prompts.append(context)
                text = answer(request)
                for stop in kwargs.get("until", []):
                    text = text.split(stop)[0] if stop else text
                out.append(text)
            return out

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise NotImplementedError

    return Replay()
