"""Invalid TOML says what the user typed wrong, at FILE:LINE:COLUMN.

Before, the config loader passed tomllib's words on: a string never closed on its line was
``invalid TOML: Illegal character '\\n' (at line 4, column 31)``, a bare word as a value
``Invalid value``, a key set twice ``Cannot overwrite a value``.
"""

from __future__ import annotations

import pytest

from ape.schemas.errors import ApeError
from ape.tasks.storage.config_file import load_config

CASES = {
    "unterminated string": (
        'name = "t"\n[prompt]\ntemplate = "What is {{ question }}?\n',
        "3:12: invalid TOML: unterminated string: the quoted text is not closed before the end of the line",
        'a text of several lines goes between """triple quotes"""',
    ),
    "unterminated multi-line string": (
        'name = "t"\n[prompt]\ntemplate = """What is\n{{ question }}?\n',
        '3:12: invalid TOML: unterminated multi-line string: the """ that opens it is never closed',
        'end the text with """',
    ),
    "unterminated literal string": (
        "name = 't\n",
        "1:8: invalid TOML: unterminated string: the ' that opens it is never closed",
        "end it with ' on the same line",
    ),
    "missing '='": (
        '[data]\nfile "data.jsonl"\n',
        "2:6: invalid TOML: missing '=' after the key 'file': each line of a table is key = value",
        "write key = value",
    ),
    "missing value": ("[run]\noutput =\n", "2:9: invalid TOML: missing value after '='", "write the value"),
    "bad value": (
        "[cli]\nprogress = yes\n",
        "2:12: invalid TOML: bad value 'yes': not a TOML value",
        "true and false are lower case",
    ),
    "duplicate key": (
        '[data]\nfile = "a.jsonl"\n  file = "b.jsonl"\n',
        "3:3: invalid TOML: duplicate key 'file': it is set twice in this table",
        "keep one of the two",
    ),
    "duplicate table": (
        '[run]\noutput = "a"\n[run]\nsolver_workers = 2\n',
        "3:1: invalid TOML: duplicate table: [run] is declared twice",
        "merge the two into one [run]",
    ),
    "unclosed table header": (
        '[data\nfile = "x"\n',
        "1:6: invalid TOML: unclosed table header: the [ is not closed by ] on its line",
        "[name]",
    ),
    "unclosed array": (
        "[run]\nstart = [1, 2\nend = 3\n",
        "3:1: invalid TOML: unclosed array: a list is not closed by ']', or a ',' is missing between its items",
        "separate the items with commas",
    ),
    "unclosed inline table": (
        '[[model]]\nargs = { behaviour = "echo"\nname = "m"\n',
        "2:28: invalid TOML: unclosed inline table: a '{' is not closed by '}' on its line",
        "end it with } on the same line",
    ),
    "backslash": (
        '[adapter]\nargs = { pattern = "\\d+" }\n',
        '2:23: invalid TOML: a backslash in a "..." string starts an escape',
        "use single quotes",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_toml_says_what_is_wrong_at_file_line_column(tmp_path, monkeypatch, case):
    text, said, hint = CASES[case]
    (tmp_path / "config.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ApeError) as caught:
        load_config("config.toml")
    line = str(caught.value)
    assert line.startswith(f"config.toml:{said}"), line
    assert hint in (caught.value.hint or ""), line
    assert "Illegal character" not in line and "\n" not in line


def test_a_message_without_a_translation_is_passed_on_with_its_place(tmp_path, monkeypatch):
    (tmp_path / "config.toml").write_text('name = "t\x01"\n')  # a control character in a string
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ApeError, match=r"^config\.toml:1:10: invalid TOML: Illegal character '\\x01'$"):
        load_config("config.toml")
