"""Text from models, endpoints and data files is inert: no escape sequences on the terminal
or in logs, no image, link, raw HTML, heading or emphasis in the markdown APE writes.

The markdown is rendered by two real markdown libraries (markdown-it-py in CommonMark mode
with GFM tables, and Python-Markdown with its tables extension) and the HTML is read with
the standard library's parser, so "no image" means no ``<img>`` element, not a string search.
"""

from __future__ import annotations

import logging
from html.parser import HTMLParser
from pathlib import Path

import markdown as python_markdown
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from ape.schemas.report import (
    CategoryScore,
    Envelope,
    HealthEntry,
    JudgeAgreement,
    JudgeModelScore,
    JudgeReport,
    LeaderboardRow,
    RegressionRow,
)
from ape.tasks.common.inert import TerminalSafeRecords, md_text, terminal_safe
from ape.tasks.report.diff import compare_items, diff_markdown
from ape.tasks.report.judge_agreement import judge_markdown
from ape.tasks.report.markdown import markdown_table
from ape.tasks.stats.item_health import health_markdown

ESC_TEXT = (
    "\x1b]0;pwned title\x07"  # window title
    "\x1b[2J\x1b[H"  # clear screen, cursor home
    "\x1b[32mall 40 items passed\x1b[0m "  # a fake coloured line
    "\x1b]8;;http://evil.example/\x1b\\click here\x1b]8;;\x1b\\ "  # OSC 8 hyperlink
    "\x9b31mc1-csi\x9d0;t2\x07 "  # the same as single C1 characters
    "\u202etxt.exe\u202c \rover\x00\x7f\x08written"  # bidi override, CR, NUL, DEL, backspace
)

IMAGE = "![x](http://127.0.0.1:9/x.png)"
HOSTILE = [
    IMAGE,
    '<img src="http://127.0.0.1:9/y.png">',
    "[x](javascript:alert(1))",
    "<http://127.0.0.1:9/auto>",
    "**Run health:** all good",
    "# heading",
    "a | b` ![z](http://127.0.0.1:9/z.png) `c",  # a pipe and backticks try to leave the cell and the code span
    "``` fenced",
    "line one\n# line two\n<script>alert(1)</script>",
    "&lt;img src=x&gt; [ref]: http://127.0.0.1:9/ref",
]


class Elements(HTMLParser):
    """The element names in rendered HTML, and the text inside ``<code>``."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.depth = 0
        self.code: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.depth += tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "code"

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.code.append(data)


RENDERERS = {
    "markdown-it-py": lambda text: MarkdownIt("commonmark").enable("table").render(text),
    "python-markdown": lambda text: python_markdown.markdown(text, extensions=["tables"]),
}
# what the builders themselves write around the outside text
OWN_TAGS = {"p", "h1", "h2", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "ul", "li", "br"}


def rendered(text: str, renderer: str) -> Elements:
    parser = Elements()
    parser.feed(RENDERERS[renderer](text))
    return parser


def assert_inert(text: str, renderer: str, *, strong: int) -> Elements:
    """No element but the builder's own, no forged emphasis, and every hostile string
    shown whole as code."""
    html = rendered(text, renderer)
    assert set(html.tags) <= OWN_TAGS, (renderer, sorted(set(html.tags) - OWN_TAGS), text)
    assert html.tags.count("strong") == strong, (renderer, text)
    assert html.tags.count("h1") <= 1 and "heading" not in " ".join(html.tags)
    code = " ".join(html.code)
    for hostile in (IMAGE, "javascript:alert(1)", "<img src="):
        assert hostile in code, (renderer, hostile, code)
    return html


# --- terminal_safe ---------------------------------------------------------------------------


def test_terminal_safe_drops_every_escape_sequence_and_control_character() -> None:
    clean = terminal_safe(ESC_TEXT)
    assert clean == "all 40 items passed click here c1-csi txt.exe overwritten"
    assert not [c for c in clean if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_terminal_safe_keeps_newlines_tabs_and_ordinary_unicode() -> None:
    text = "line\n\tindented: é ▼ regressed ± 0.3 — 日本語 🙂 [bold]not markup[/bold]"
    assert terminal_safe(text) is text or terminal_safe(text) == text
    assert terminal_safe(42) == "42"


def test_an_unterminated_sequence_loses_its_escape() -> None:
    assert terminal_safe("\x1b]0;no end") == "0;no end"
    assert "\x1b" not in terminal_safe("a\x1b")


def test_the_log_filter_cleans_message_arguments_and_tracebacks(tmp_path: Path) -> None:
    logger = logging.getLogger("ape-test-inert")
    logger.propagate = False
    handler = logging.FileHandler(tmp_path / "run.log", encoding="utf-8")
    handler.addFilter(TerminalSafeRecords())
    logger.addHandler(handler)
    try:
        logger.warning("item %s: session error: %s", "i0", ESC_TEXT)
        try:
            raise RuntimeError(ESC_TEXT)
        except RuntimeError:
            logger.exception("failed: %d", 1)
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = (tmp_path / "run.log").read_text()
    assert "item i0: session error: all 40 items passed" in text and "failed: 1" in text
    assert "RuntimeError: all 40 items passed" in text  # the traceback's last line, cleaned
    assert not [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


# --- md_text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "`plain`"),
        ("a `b` c", "``a `b` c``"),
        ("``x", "``` ``x ```"),
        ("x`", "`` x` ``"),
        ("a|b", "`a\u00a6b`"),
        ("two\nlines\ttab", "`two lines tab`"),
        ("", ""),
        (" \n ", ""),
    ],
)
def test_md_text_fences_past_any_backticks_and_keeps_one_line(text: str, expected: str) -> None:
    assert md_text(text) == expected


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
@pytest.mark.parametrize("hostile", HOSTILE)
def test_md_text_shows_each_hostile_string_as_its_characters(hostile: str, renderer: str) -> None:
    html = rendered(f"| a |\n|---|\n| {md_text(hostile)} |\n\nline: {md_text(hostile)}\n", renderer)
    assert set(html.tags) <= {"table", "thead", "tbody", "tr", "th", "td", "p", "code"}, html.tags
    shown = " ".join(hostile.replace("|", "\u00a6").split())
    assert html.code == [shown, shown]


# --- the builders ------------------------------------------------------------------------------


def hostile_envelope() -> Envelope:
    """Answers (the health signature), categories, model ids and an error message from outside."""
    categories = {text: CategoryScore(n_items=1, mean_score=0.0) for text in HOSTILE[:4]}
    rows = [
        LeaderboardRow(rank=1, model_id=HOSTILE[4], n_items=4, n_sessions=4, runs_per_data=1, by_category=categories),
        LeaderboardRow(rank=2, model_id=HOSTILE[6], n_items=4, n_sessions=4, runs_per_data=1, by_category=categories),
    ]
    health = {
        HOSTILE[4]: HealthEntry(
            sessions=10, kind="identical answer", signature=" ".join(HOSTILE), count=10, share=1.0, suspect=True
        )
    }
    regression = RegressionRow(
        model_id=HOSTILE[0], run_id="r2", against="baseline", reference_run_id=HOSTILE[2], verdict="regressed"
    )
    return Envelope(leaderboard=rows, health=health, regressions=[regression])


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_leaderboard_markdown_holds_no_image_link_or_html(renderer: str) -> None:
    text = markdown_table(hostile_envelope())
    # the builder's own bold: the health line's label and the regression verdict
    assert_inert(text, renderer, strong=2)
    assert "\x1b" not in markdown_table(
        Envelope(leaderboard=[LeaderboardRow(rank=1, model_id=ESC_TEXT, n_items=1, n_sessions=1, runs_per_data=1)])
    )


@pytest.mark.parametrize("renderer", sorted(RENDERERS))
def test_report_error_markdown_holds_no_image_link_or_html(renderer: str) -> None:
    envelope = Envelope.model_validate({"error": {"type": "ApeError", "message": " ".join(HOSTILE)}})
    assert_inert(markdown_table(envelope), renderer, strong=1)


def test_regressions_artifact_holds_no_image_link_or_html() -> None:
    from ape.schemas.config import ApeConfig
    from ape.tasks.after_run.alerts import regressions_markdown

    config = ApeConfig.model_validate(
        {
            "name": "bench",
            "data": {"file": "data.jsonl", "schema": "schema:Item"},
            "prompt": {"template": "{{ question }}"},
            "model": [{"name": "m", "provider": "mock"}],
            "checker": {"implementation": "exact_match"},
        }
    )
    row = RegressionRow(
        model_id=HOSTILE[4],
        run_id="r2",
        against="baseline",
        reference_run_id=HOSTILE[1],
        verdict="regressed",
        mean_diff=-0.2,
        p_value=0.01,
        note=HOSTILE[2],
        flipped_items={"pass->fail": [IMAGE, HOSTILE[1]]},
        changed_settings=[HOSTILE[2], HOSTILE[3]],
    )
    for renderer in RENDERERS:
        # the verdict and the "Why ... moved" label are the builder's own bold
        assert_inert(regressions_markdown(config, "r2", [row]), renderer, strong=2)


def test_diff_markdown_holds_no_image_link_or_html() -> None:
    def sessions(answer: str, correct: bool) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "model_id": HOSTILE[5],
                    "item_id": IMAGE,
                    "run_index": 0,
                    "score": float(correct),
                    "correct": correct,
                    "solution": answer,
                    "raw_output": answer,
                    "check_metadata": None,
                    "error_message": None,
                    "check_error_message": None,
                }
            ]
        )

    items = compare_items(sessions(HOSTILE[1], True), sessions(HOSTILE[2], False))
    for renderer in RENDERERS:
        html = assert_inert(diff_markdown(items, [], "r1", "r2"), renderer, strong=0)
        assert html.tags.count("h2") == 2  # the model's section and "What changed", nothing forged


def test_item_ledger_and_judge_tables_hold_no_image_link_or_html() -> None:
    ledger = pd.DataFrame(
        [
            {"item_id": text, "models": 1, "runs": 3, "pass_share": 0.0, "flip_rate": 0.0}
            | {"flip_pairs": 2, "versions": 1, "flag": "never passed"}
            for text in HOSTILE[:3]
        ]
    )
    agreement = JudgeAgreement(
        n=2, accuracy=0.5, kappa=0.0, labels=HOSTILE[:3], confusion=[[1, 0, 0], [0, 1, 0], [0, 0, 0]]
    )
    judge = JudgeReport(judge=HOSTILE[4], agreement=agreement, models=[JudgeModelScore(model_id=HOSTILE[2], n_items=2)])
    for renderer in RENDERERS:
        assert_inert(health_markdown(ledger), renderer, strong=0)
        assert_inert("\n".join(judge_markdown(judge)), renderer, strong=0)
