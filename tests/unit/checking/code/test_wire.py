"""The wire format between code_exec's processes: plain data round-trips, anything else is refused."""

from __future__ import annotations

import json
import math
import os

import pytest

from ape.tasks.checking.code import wire

PLAIN = [
    None,
    True,
    0,
    -(10**30),
    2.5,
    -0.0,
    math.inf,
    "text é",
    b"\x00raw",
    1 + 2j,
    [1, [2, (3, {4: frozenset({5})})]],
    {"a": {1, 2}, (1, "b"): [None]},
]


@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_plain_data_round_trips_with_its_exact_types(value: object) -> None:
    back = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)  # -0.0 and nested types too


def test_nan_round_trips() -> None:
    assert math.isnan(wire.decode(json.loads(json.dumps(wire.encode(math.nan)))))


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class Number(int):
    pass


@pytest.mark.parametrize(
    "value",
    [AlwaysEqual(), Number(3), [1, AlwaysEqual()], {"k": print}],
    ids=["always-equal", "int-subclass", "nested-always-equal", "builtin-function"],
)
def test_encoding_refuses_what_is_not_plain(value: object) -> None:
    with pytest.raises(wire.NotPlain, match="an object of type"):
        wire.encode(value)


def test_encoding_refuses_a_list_that_contains_itself() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(wire.NotPlain, match="nested more than"):
        wire.encode(loop)


@pytest.mark.parametrize(
    "data",
    [
        [1, 2],  # a bare JSON array
        {"x": 1, "y": 2},  # a bare object
        {"z": [1]},  # an unknown tag
        {"b": "zz"},  # bytes that are not hex
        {"s": [{"l": []}]},  # a set of lists
        {"d": [[{"l": []}, 1]]},  # a dict with a list key
        {"d": [[1]]},  # an entry without a value
        {"c": ["1", 2]},  # a complex of strings
    ],
    ids=repr,
)
def test_decoding_refuses_anything_but_the_tags(data: object) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(data)


def test_decoding_bounds_depth_and_frames() -> None:
    deep: object = 1
    for _ in range(wire.MAX_DEPTH + 1):
        deep = {"l": [deep]}
    with pytest.raises(wire.WireError, match="nested"):
        wire.decode(deep)
    for frame, error in (
        ((wire.MAX_FRAME + 1).to_bytes(4, "big") + b"{}", "over the limit"),
        ((4).to_bytes(4, "big") + b"[1]x", "not JSON"),
        ((3).to_bytes(4, "big") + b"[1]", "not a JSON object"),
    ):
        read, write = os.pipe()
        try:
            os.write(write, frame)
            with pytest.raises(wire.WireError, match=error):
                wire.receive(read)
        finally:
            os.close(read)
            os.close(write)


def test_frames_cross_a_pipe() -> None:
    read, write = os.pipe()
    try:
        wire.send(write, {"r": wire.encode([1, "two"])})
        wire.send(write, {"r": None})
        assert wire.decode(wire.receive(read)["r"]) == [1, "two"]  # type: ignore[index]
        assert wire.receive(read) == {"r": None}
        os.close(write)
        write = -1
        assert wire.receive(read) is None
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
