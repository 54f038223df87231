"""The wire format between code_exec's two sandboxed processes: plain data as tagged JSON.

The harness (:mod:`ape.tasks.checking.code.harness`) runs the tests in a trusted process
and the candidate's code in a child process of its own; what the child sends back is
decoded here, by :func:`decode`, and nothing else. A value on the wire is a JSON ``null``,
``true``/``false``, number or string, or a one-key object that tags a container:
``{"l": [...]}`` list, ``{"t": [...]}`` tuple, ``{"s": [...]}`` set, ``{"f": [...]}``
frozenset, ``{"d": [[key, value], ...]}`` dict, ``{"b": "<hex>"}`` bytes, ``{"c": [re, im]}``
complex. Anything else (a bare JSON array or object, an unknown tag, more than
:data:`MAX_DEPTH` levels or :data:`MAX_ITEMS` values, a frame over :data:`MAX_FRAME`
bytes) is refused with :class:`WireError`. The decoder builds exact builtin types only,
so no object of the candidate's (one whose ``__eq__`` always says True) can cross:
pickle and marshal are not used, since both can build objects other than plain data.

This file is also the first part of the program that runs in the sandbox (``code_exec``
puts its text before the harness's), so it uses nothing but the standard library.
"""

from __future__ import annotations

import json
import os
from typing import Any

MAX_DEPTH = 100
MAX_ITEMS = 1_000_000
MAX_FRAME = 16 * 1024 * 1024
_LENGTH_BYTES = 4
_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}
# bound once, at import: in the solution process code that later replaces json.dumps or
# json.loads changes nothing here
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_loads = json.loads


class WireError(ValueError):
    """A message that is not the wire format's plain data (the message says what)."""


class NotPlain(ValueError):
    """A value that cannot be sent: the message names the first object that is not plain."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready tagged data; NotPlain naming the first object that is not plain data."""
    return _encode(value, 0, [0])


def _encode(value: Any, depth: int, count: list[int]) -> Any:  # noqa: C901 - one branch per plain type
    kind = type(value)
    count[0] += 1
    if count[0] > MAX_ITEMS:
        raise NotPlain(f"a value of more than {MAX_ITEMS} items")
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return value
    if depth >= MAX_DEPTH:
        raise NotPlain(f"a value nested more than {MAX_DEPTH} levels deep")
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        return {_TAGS[kind]: [_encode(item, depth + 1, count) for item in value]}
    if kind is dict:
        return {"d": [[_encode(k, depth + 1, count), _encode(v, depth + 1, count)] for k, v in value.items()]}
    try:
        name = type.__dict__["__name__"].__get__(kind)
    except Exception:  # a hostile metaclass
        name = "an unnamed type"
    raise NotPlain(f"an object of type {name}")


def decode(data: Any) -> Any:
    """The plain value that tagged JSON data stands for; WireError for anything else."""
    return _decode(data, 0, [0])


def _decode(data: Any, depth: int, count: list[int]) -> Any:  # noqa: C901 - one branch per tag
    count[0] += 1
    if count[0] > MAX_ITEMS:
        raise WireError(f"more than {MAX_ITEMS} values")
    kind = type(data)
    if data is None or kind is bool or kind is int or kind is float or kind is str:
        return data
    if kind is not dict or len(data) != 1:
        raise WireError(f"a bare JSON {'object' if kind is dict else kind.__name__} where a tagged value belongs")
    if depth >= MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} levels deep")
    ((tag, body),) = data.items()
    if tag == "b" and type(body) is str:
        try:
            return bytes.fromhex(body)
        except ValueError as exc:
            raise WireError("bytes that are not hex") from exc
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(body[0], body[1])
    if tag in ("l", "t", "s", "f") and type(body) is list:
        items = [_decode(item, depth + 1, count) for item in body]
        if tag == "l":
            return items
        if tag == "t":
            return tuple(items)
        try:
            return set(items) if tag == "s" else frozenset(items)
        except TypeError as exc:
            raise WireError("a set of unhashable items") from exc
    if tag == "d" and type(body) is list:
        result = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise WireError("a dict entry that is not a [key, value] pair")
            key = _decode(pair[0], depth + 1, count)
            try:
                result[key] = _decode(pair[1], depth + 1, count)
            except TypeError as exc:
                raise WireError("a dict with an unhashable key") from exc
        return result
    raise WireError(f"an unknown tag {tag[:20]!r}")


def pack(message: dict[str, Any]) -> bytes:
    """One frame: a 4-byte big-endian length, then the message as JSON."""
    body = _dumps(message).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise NotPlain(f"a message of {len(body)} bytes, over the {MAX_FRAME} bytes a value may take")
    return len(body).to_bytes(_LENGTH_BYTES, "big") + body


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one frame to ``fd`` (all of it; OSError when the reader is gone)."""
    view = memoryview(pack(message))
    while view:
        view = view[os.write(fd, view) :]


_BUFFERS: dict[int, bytearray] = {}  # what was read from a descriptor past the last frame


def _read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``, read in large chunks (one read a call, most often); None at end of file."""
    buffer = _BUFFERS.setdefault(fd, bytearray())
    while len(buffer) < size:
        chunk = os.read(fd, max(size - len(buffer), 1 << 16))
        if not chunk:
            _BUFFERS.pop(fd, None)  # a later descriptor of this number starts empty
            return None
        buffer += chunk
    taken = bytes(buffer[:size])
    del buffer[:size]
    return taken


def receive(fd: int) -> dict[str, Any] | None:
    """The next frame's message from ``fd``, None at end of file; WireError for a bad frame.

    Only the outer layer is checked here (a JSON object with string keys); its values are
    decoded by the caller with :func:`decode`, field by field.
    """
    head = _read_exactly(fd, _LENGTH_BYTES)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME:
        _BUFFERS.pop(fd, None)  # the stream cannot be read on from here
        raise WireError(f"a frame of {size} bytes, over the limit of {MAX_FRAME}")
    body = _read_exactly(fd, size)
    if body is None:
        return None
    try:
        message = _loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise WireError("a frame that is not JSON") from exc
    if type(message) is not dict:
        raise WireError("a frame that is not a JSON object")
    return message
