"""What a TOML syntax error means, in the words of what the user typed wrong.

``tomllib`` names the place but says what its parser met, not what is missing: a string
never closed on its line reads ``Illegal character '\\n' (at line 4, column 31)``, a bare
word as a value ``Invalid value``, a key set twice ``Cannot overwrite a value``. The common
ones are translated here (the rest are passed on as tomllib says them); the place becomes
the error's ``FILE:LINE:COLUMN``. tomllib's messages are matched by their text, which has
not changed since Python 3.11; a message this table does not know is shown unchanged.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

from ape.schemas.errors import ApeError

_PLACE = re.compile(r"^(?P<msg>.*?)\s*\(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$", re.S)

MULTILINE_QUOTES = ('"""', "'''")


@dataclass(frozen=True)
class Place:
    """Where tomllib stopped: 1-based line and column, and the text of that line."""

    line: int
    column: int
    text: str

    @property
    def before(self) -> str:
        """The line up to the place, without its indentation."""
        return self.text[: self.column - 1].strip()

    @property
    def rest(self) -> str:
        """The line from the place on."""
        return self.text[self.column - 1 :]


def toml_error(exc: tomllib.TOMLDecodeError, text: str, file: str) -> ApeError:
    """The ApeError for ``exc`` raised reading ``text`` (the file named ``file`` in errors):
    ``FILE:LINE:COLUMN: invalid TOML: what is wrong (what to do)``."""
    said = str(exc)
    found = _PLACE.match(said)
    message = found.group("msg") if found else said
    if found and found.group("line"):
        place = _place(text, int(found.group("line")), int(found.group("col")))
    else:  # "at end of document": the last line, after its last character
        lines = text.splitlines() or [""]
        place = _place(text, len(lines), len(lines[-1]) + 1)
    for pattern, explain in _TRANSLATIONS:
        match = re.fullmatch(pattern, message)
        if match:
            what, hint, place = explain(match, place, text)
            break
    else:
        what, hint = message, None
    return ApeError(f"invalid TOML: {what}", where=f"{file}:{place.line}:{place.column}", hint=hint)


def _place(text: str, line: int, column: int) -> Place:
    lines = text.splitlines()
    return Place(line, column, lines[line - 1] if 0 < line <= len(lines) else "")


def _at_offset(text: str, offset: int) -> Place:
    """The place of character ``offset`` of ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return _place(text, line, column)


Explained = tuple[str, str | None, Place]


def _open_string(match: re.Match[str], place: Place, text: str) -> Explained:
    quote = place.text[: place.column - 1].rstrip()  # the string runs to the line's end
    opened = max(quote.rfind('"'), quote.rfind("'"))
    where = _place(text, place.line, opened + 1) if opened >= 0 else place
    return (
        "unterminated string: the quoted text is not closed before the end of the line",
        'end it with the quote it began with; a text of several lines goes between """triple quotes"""',
        where,
    )


def _open_literal(match: re.Match[str], place: Place, text: str) -> Explained:
    quote = ast.literal_eval(match.group(1))
    opened = text.rfind(quote)  # no later quote of this kind exists, or tomllib would have found it
    return (
        f"unterminated string: the {quote} that opens it is never closed",
        f"end it with {quote} on the same line",
        _at_offset(text, opened) if opened >= 0 else place,
    )


def _open_multiline(match: re.Match[str], place: Place, text: str) -> Explained:
    # the opening delimiter is the last of its kind: any later one would have closed it
    odd = [quote for quote in MULTILINE_QUOTES if text.count(quote) % 2 == 1]
    quote = max(odd or MULTILINE_QUOTES, key=text.rfind)
    opened = text.rfind(quote)
    return (
        f"unterminated multi-line string: the {quote} that opens it is never closed",
        f"end the text with {quote}",
        _at_offset(text, opened) if opened >= 0 else place,
    )


def _missing_equals(match: re.Match[str], place: Place, text: str) -> Explained:
    key = place.before
    named = f" '{key}'" if key else ""
    return (
        f"missing '=' after the key{named}: each line of a table is key = value",
        "write key = value, text in quotes; a section header goes in [brackets]",
        place,
    )


def _bad_value(match: re.Match[str], place: Place, text: str) -> Explained:
    token = re.match(r"[^\s,\]}#]*", place.rest)
    word = token.group(0) if token else ""
    if not word:
        return ("missing value after '='", "write the value after the '=' on the same line", place)
    return (
        f"bad value {word!r}: not a TOML value",
        'put text in quotes, "like this"; true and false are lower case; lists go in [ ], tables in { }',
        place,
    )


def _duplicate_key(match: re.Match[str], place: Place, text: str) -> Explained:
    key = place.text.split("=", 1)[0].strip() if "=" in place.text else ""
    named = f" '{key}'" if key else ""
    where = _place(text, place.line, place.text.find(key) + 1 if key else 1)
    return (f"duplicate key{named}: it is set twice in this table", "keep one of the two", where)


def _duplicate_table(match: re.Match[str], place: Place, text: str) -> Explained:
    try:
        parts = ast.literal_eval(match.group(1))
        name = ".".join(str(part) for part in parts)
    except (ValueError, SyntaxError):
        name = match.group(1)
    return (
        f"duplicate table: [{name}] is declared twice (or its keys were set before)",
        f"merge the two into one [{name}]; several tables of one kind are written [[{name}]] each",
        _place(text, place.line, 1),
    )


def _open_header(match: re.Match[str], place: Place, text: str) -> Explained:
    close = match.group(1)
    opening = "[[" if close == "]]" else "["
    return (
        f"unclosed table header: the {opening} is not closed by {close} on its line",
        f"write the header as {opening}name{close} on a line of its own",
        place,
    )


def _open_array(match: re.Match[str], place: Place, text: str) -> Explained:
    return (
        "unclosed array: a list is not closed by ']', or a ',' is missing between its items",
        "separate the items with commas and end the list with ]",
        place,
    )


def _open_inline_table(match: re.Match[str], place: Place, text: str) -> Explained:
    return (
        "unclosed inline table: a '{' is not closed by '}' on its line",
        "separate its keys with commas and end it with } on the same line, or write a [table] section",
        place,
    )


def _expected_key(match: re.Match[str], place: Place, text: str) -> Explained:
    inline = "{" in place.text[: place.column - 1]
    return (
        "expected a key here",
        "an inline table { ... } stays on one line, with no ',' after its last key"
        if inline
        else "a key is a bare word (letters, digits, - and _) or text in quotes",
        place,
    )


def _after_statement(match: re.Match[str], place: Place, text: str) -> Explained:
    return (
        f"unexpected {place.rest.strip()[:30]!r} after the value: one key = value per line",
        "put each key on its own line; quote a text that holds spaces",
        place,
    )


def _backslash(match: re.Match[str], place: Place, text: str) -> Explained:
    return (
        'a backslash in a "..." string starts an escape (\\n, \\t, \\\\, ...)',
        "write \\\\ for one backslash, or use single quotes, where a backslash is itself: 'C:\\path', '\\d+'",
        place,
    )


def _bad_statement(match: re.Match[str], place: Place, text: str) -> Explained:
    return (
        "not a TOML line: expected key = value, a [table] header or a # comment",
        "check the line for a stray character",
        place,
    )


_TRANSLATIONS: list[tuple[str, Callable[[re.Match[str], Place, str], Explained]]] = [
    (r"Illegal character '\\n'", _open_string),
    (r"Expected (\"'\"|'\"')", _open_literal),
    (r"Unterminated string", _open_multiline),
    (r"Expected '=' after a key in a key/value pair", _missing_equals),
    (r"Invalid value", _bad_value),
    (r"Cannot overwrite a value", _duplicate_key),
    (r"Cannot declare (\(.*\)) twice", _duplicate_table),
    (r"Expected '(\]\]?)' at the end of an? (?:table|array) declaration", _open_header),
    (r"Unclosed array", _open_array),
    (r"Unclosed inline table", _open_inline_table),
    (r"Invalid initial character for a key part", _expected_key),
    (r"Expected newline or end of document after a statement", _after_statement),
    (r"Unescaped '\\' in a string", _backslash),
    (r"Invalid statement", _bad_statement),
]
