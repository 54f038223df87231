"""``ape validate`` checks a mock's data-naming arguments against the data: an ``oracle``
``field`` that no item has, a ``scripted`` table keyed by an id that differs only in case.

Both used to validate as ok and end every session of ``ape run`` in an error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ape.cli import main
from tests.helpers.runner import make_benchmark


def _validate(tmp_path: Path, model: str, **kwargs: str) -> tuple[int, str]:
    config = make_benchmark(tmp_path / "bench", n=3, models=model, **kwargs)  # type: ignore[arg-type]
    code = main(["validate", str(config)])
    return code, config.name


def test_oracle_field_the_items_lack_names_the_key_and_the_near_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = '[model]\nname = "o"\nprovider = "mock"\nmodel = "oracle"\nargs = { field = "answers" }\n'
    code, _ = _validate(tmp_path, model)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "[model] 'o' args.field" in err and "'answers' is not a field of the items" in err
    assert "did you mean 'answer'?" in err


def test_oracle_with_a_real_field_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = '[model]\nname = "o"\nprovider = "mock"\nmodel = "oracle"\nargs = { field = "answer" }\n'
    code, _ = _validate(tmp_path, model)
    assert code == 0, capsys.readouterr().err


def test_scripted_key_that_differs_in_case_gets_a_case_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    responses = 'fr0 = "5", FR1 = "7", fr2 = "9"'
    model = f'[model]\nname = "s"\nprovider = "mock"\nmodel = "scripted"\nargs = {{ responses = {{ {responses} }} }}\n'
    code, _ = _validate(tmp_path, model, id_prefix="fr")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "[model] 's' args.responses" in err and "'FR1' is no item id of the data" in err
    assert "item ids are case-sensitive: the item's id is 'fr1'" in err


def test_scripted_key_outside_a_slice_is_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    responses = 'fr0 = "5", fr1 = "7", zz9 = "9"'
    model = f'[model]\nname = "s"\nprovider = "mock"\nmodel = "scripted"\nargs = {{ responses = {{ {responses} }} }}\n'
    code, _ = _validate(tmp_path, model, id_prefix="fr")
    assert code == 2 and "'zz9' is no item id" in capsys.readouterr().err  # the whole file: an unknown id
    bench = tmp_path / "bench" / "config.toml"
    bench.write_text(bench.read_text().replace("[data]\n", '[data]\nend_id = "fr1"\n'))
    assert main(["validate", str(bench)]) == 0, capsys.readouterr().err
