"""Text from outside APE made inert: for the terminal and logs, and for markdown.

Models, OpenAI-compatible endpoints, data files and checkers write text that APE shows:
error messages, answers, reasons, item ids, categories. Shown raw, that text acts:
escape sequences retitle the terminal window, clear the screen, paint a fake "all
passed" line or hide a hyperlink (OSC 8); in a Prefect markdown artifact an answer
``![x](http://host/x.png)`` makes the browser fetch a remote image when the artifact
is opened, ``[x](javascript:...)`` becomes a link and ``**Run health:** all good``
forges a line. Two helpers, one per place text lands:

- :func:`terminal_safe` before the terminal, ``run.log`` and the Prefect server's logs;
  :class:`TerminalSafeRecords` applies it to every record a handler writes (the ``ape``
  logger's terminal, run.log and API handlers, and Prefect's own console and API handlers),
  so a log line that quotes outside text needs no care at the call;
- :func:`md_text` for every piece of outside text in a markdown artifact,
  ``leaderboard.md``, ``diff.md`` and the tables the command line prints.
"""

from __future__ import annotations

import logging
import re

__all__ = ["TerminalSafeRecords", "md_text", "terminal_safe"]

# Whole escape sequences first (so their parameters do not stay behind as litter), then any
# control character left: C0 except tab and newline, DEL, C1 (U+0080-U+009F, which some
# terminals read as CSI/OSC introducers), and the bidirectional overrides and isolates that
# reorder what a line seems to say ("Trojan Source").
_SEQUENCES = re.compile(
    r"""
      \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)         # OSC: window title, OSC 8 hyperlink (BEL or ST ends it)
    | \x1b[PX^_][^\x1b]*\x1b\\                  # DCS, SOS, PM, APC strings
    | \x1b\[[0-?]*[ -/]*[@-~]                   # CSI: colours, cursor moves, clear screen
    | \x1b[ -/]*[0-~]                           # the other two- and three-byte escapes
    | \x9b[0-?]*[ -/]*[@-~]                     # CSI as one C1 character
    | \x9d[^\x07\x9c\x1b]*(?:\x07|\x9c)         # OSC as one C1 character
    """,
    re.VERBOSE,
)
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: object) -> str:
    """``text`` without escape sequences or control characters; newline and tab stay.

    For whatever came from a model, an endpoint, a data file or a plugin, before the
    terminal, a log file or the Prefect server's logs. A carriage return goes too: it
    would let a line overwrite the one APE printed before it."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():  # the common case, and cheap: nothing to strip
        return value
    return _CONTROLS.sub("", _SEQUENCES.sub("", value))


class TerminalSafeRecords(logging.Filter):
    """A handler filter that runs :func:`terminal_safe` over each record's message and
    traceback before any handler formats it. The record is changed in place, so every
    handler after this one sees the clean text too; APE's own colours are not in log
    records (the progress bar draws them), so nothing of APE's is lost."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it as logging does
            return True
        clean = terminal_safe(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = terminal_safe(record.exc_text)
        if record.stack_info:
            record.stack_info = terminal_safe(record.stack_info)
        return True


def md_text(text: object) -> str:
    """``text`` as a markdown code span that shows its characters as they are, on one line.

    Inside a code span no renderer (CommonMark, GFM, the Prefect UIs) makes an image, link,
    autolink, heading, emphasis or raw HTML; the fence is one backtick longer than the
    longest run of backticks in the text, so the text cannot close it. A pipe shows as
    ``¦``: table renderers split cells before they see code spans and disagree on escaped
    pipes (``a\\\\|b`` splits in one, not in another), and a split cell would end the code span.
    Control characters go as in :func:`terminal_safe`, since the same markdown is printed
    on the terminal. Empty text is an empty string."""
    value = " ".join(terminal_safe(text).split())  # newlines and tabs would end a table row
    if not value:
        return ""
    value = value.replace("|", "\u00a6")
    longest = max((len(run) for run in re.findall("`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"
