"""env_number: unset means the default; a value outside what is allowed is one error naming it."""

from __future__ import annotations

import pytest

from ape.schemas.errors import ApeError
from ape.tasks.common.env_number import env_number

NAME = "APE_TEST_ENV_NUMBER"


def _read() -> float:
    return env_number(NAME, 7.0, lambda v: v > 0, expected="a positive number", hint="unset it for 7")


def test_unset_or_blank_gives_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NAME, raising=False)
    assert _read() == 7.0
    monkeypatch.setenv(NAME, "   ")
    assert _read() == 7.0


def test_an_allowed_value_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, " 2.5 ")
    assert _read() == 2.5


@pytest.mark.parametrize("text", ["soon", "-1", "0", "nan", "inf", "-inf"])
def test_anything_else_is_one_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(NAME, text)
    with pytest.raises(ApeError, match=f"{NAME}='{text}' is not a positive number") as raised:
        _read()
    assert raised.value.where == NAME
    assert raised.value.hint == "unset it for 7"
