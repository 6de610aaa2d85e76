"""Splitting replies at Telegram's limit, and rendering the model's Markdown as text plus
entities that Telegram accepts (checked as the fake Bot API checks them)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from src.bot.formatting import (
    TELEGRAM_LIMIT,
    Part,
    render_markdown,
    reply_parts,
    split_message,
    split_part,
    utf16_len,
)
from tests.fakes.bot_api_entities import entities_problem


def _squash(text: str) -> str:
    return "".join(text.split())


def test_short_text_is_one_chunk_and_blank_is_none() -> None:
    assert split_message("  hello  ") == ["hello"]
    assert split_message(" \n\t ") == []
    assert split_message("a" * TELEGRAM_LIMIT) == ["a" * TELEGRAM_LIMIT]
    assert len(split_message("a" * (TELEGRAM_LIMIT + 1))) == 2


def test_paragraph_boundaries_come_first() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(20)]
    chunks = split_message("\n\n".join(p.strip() for p in paragraphs))
    assert len(chunks) > 1
    for chunk in chunks:
        assert utf16_len(chunk) <= TELEGRAM_LIMIT
        assert chunk.startswith("Paragraph ") and chunk.endswith("word")


def test_lines_then_sentences_then_words() -> None:
    lines = "\n".join(f"line {i} " + "x" * 50 for i in range(200))
    assert all(c.startswith("line ") for c in split_message(lines))
    sentences = " ".join(f"Sentence number {i} is here." for i in range(500))
    chunks = split_message(sentences)
    assert len(chunks) > 1 and all(c.endswith(".") for c in chunks)
    assert all(c.startswith("Sentence") for c in chunks)
    words = " ".join(f"w{i}" for i in range(3000))
    chunks = split_message(words)
    assert " ".join(chunks) == words  # no word was cut


def test_a_huge_single_word_is_cut_hard() -> None:
    word = "x" * 10_000
    chunks = split_message(word)
    assert [len(c) for c in chunks] == [4096, 4096, 1808]
    assert "".join(chunks) == word


def test_words_are_not_cut_while_a_space_allows() -> None:
    assert split_message("hi " + "y" * 5000) == ["hi", "y" * 4096, "y" * 904]


def test_indentation_after_a_line_break_is_kept() -> None:
    text = "x" * 3000 + "\n\n    indented code\n    more"
    assert split_message(text, 3010) == ["x" * 3000, "    indented code\n    more"]


def test_unicode_is_measured_in_utf16_and_graphemes_stay_whole() -> None:
    emoji = "😀" * 5000  # each is two UTF-16 units
    chunks = split_message(emoji)
    assert all(utf16_len(c) <= TELEGRAM_LIMIT for c in chunks)
    assert "".join(chunks) == emoji and len(chunks) == 3
    family = "👨\u200d👩\u200d👧" * 1500
    for chunk in split_message(family):
        assert not chunk.startswith("\u200d") and not chunk.endswith("\u200d")
        assert chunk.startswith("👨") and chunk.endswith("👧")
    accents = "e\u0301" * 3000
    for chunk in split_message(accents):
        assert chunk.startswith("e") and chunk.endswith("\u0301")
    cyrillic = "Привет, мир. " * 800
    assert _squash("".join(split_message(cyrillic))) == _squash(cyrillic)


def test_custom_limit() -> None:
    chunks = split_message("one two three four five", limit=9)
    assert chunks == ["one two", "three", "four five"]


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(["a", "б", " ", "\n", ".", "😀", "\u0301", "\u200d", "!"]),
        max_size=600,
    ),
    st.integers(min_value=2, max_value=80),
)
def test_chunks_fit_and_lose_nothing(text: str, limit: int) -> None:
    chunks = split_message(text, limit)
    assert all(c.strip() and c == c.rstrip() and utf16_len(c) <= limit for c in chunks)
    assert not any(c[0] in "\r\n" for c in chunks)
    assert _squash("".join(chunks)) == _squash(text)


def _dicts(part: Part) -> list[dict[str, Any]]:
    """Return a part's entities as the Bot API receives them (JSON)."""
    return [e.to_dict() for e in part.entities]


def _covered(part: Part, kind: str) -> list[str]:
    """Return the texts the entities of one type cover (offsets in UTF-16 units)."""
    units = part.text.encode("utf-16-le")
    return [
        units[2 * e.offset : 2 * (e.offset + e.length)].decode("utf-16-le")
        for e in part.entities
        if e.type == kind
    ]


def _valid(part: Part) -> None:
    assert part.text.strip() and utf16_len(part.text) <= TELEGRAM_LIMIT
    assert entities_problem(part.text, _dicts(part)) is None


def test_headings_keep_their_text_and_become_bold() -> None:
    part = render_markdown("## C# in 2024\n\n### F# too ###\nText about **C#**.")
    assert part.text == "C# in 2024\n\nF# too\nText about C#."
    assert _covered(part, "bold") == ["C# in 2024", "F# too", "C#"]
    _valid(part)


def test_links_with_parentheses_keep_their_whole_url() -> None:
    url = "https://en.wikipedia.org/wiki/C_Sharp_(programming_language)"
    part = render_markdown(f"Read [the article]({url}) (in English).")
    assert part.text == "Read the article (in English)."
    assert [(e.url, _covered(part, "text_link")) for e in part.entities] == [(url, ["the article"])]
    # A target Telegram cannot open would make it refuse the message: the text stays.
    local = render_markdown("[notes](notes.html) and [admin](http://localhost:8080)")
    assert local.text == "notes and admin" and local.entities == ()


def test_nested_and_overlapping_bold_and_italic() -> None:
    part = render_markdown("***both*** and **bold *inner* bold** and *it **b** it* and _u_")
    assert part.text == "both and bold inner bold and it b it and u"
    assert sorted(_covered(part, "bold")) == ["b", "bold inner bold", "both"]
    assert sorted(_covered(part, "italic")) == ["both", "inner", "it b it", "u"]
    _valid(part)


def test_tables_become_aligned_code_blocks() -> None:
    part = render_markdown("| Язык | Год |\n|---|---|\n| C# | 2000 |\n| Python | 1991 |")
    rows = part.text.split("\n")
    assert [row.rstrip() for row in rows] == [
        "Язык   | Год",
        "-------+-----",
        "C#     | 2000",
        "Python | 1991",
    ]
    assert _covered(part, "pre") == [part.text]  # monospace keeps the columns aligned


def test_block_quotes_and_lists() -> None:
    part = render_markdown("> first line\n> second\n\n- one\n- two\n\n~~old~~ `code`")
    assert _covered(part, "blockquote") == ["first line\nsecond"]
    assert ">" not in part.text and "- one" not in part.text
    assert _covered(part, "strikethrough") == ["old"] and _covered(part, "code") == ["code"]


def test_html_and_stray_markup_are_shown_as_written() -> None:
    part = render_markdown("x<y and y>z; `git checkout <branch>`; <b>b</b> & 2 * 3")
    assert part.text == "x<y and y>z; git checkout <branch>; <b>b</b> & 2 * 3"
    assert render_markdown("").text == ""
    # Rendered to nothing: sent as written (Telegram refuses an empty text), not shown live.
    assert reply_parts("```\n\n```", "markdown") == [Part("```\n\n```")]
    assert reply_parts("```\n\n```", "markdown", raw_if_empty=False) == []
    # A custom emoji needs a paid username: its fallback text stays, unformatted.
    assert render_markdown("![👍](tg://emoji?id=5368324170671202286)") == Part("👍")


def test_a_fence_with_a_long_line_is_split_inside_the_code_never_empty() -> None:
    line = '{"key":"' + "v" * 9000 + '"}'
    parts = reply_parts(f"```json\n{line}\n```", "markdown")
    assert len(parts) == 3
    assert "".join(p.text for p in parts) == line
    for part in parts:
        _valid(part)
        assert _dicts(part) == [
            {"type": "pre", "offset": 0, "length": utf16_len(part.text), "language": "json"}
        ]


def test_markdown_splits_at_4096_utf16_units_around_surrogate_pairs() -> None:
    paragraph = "**Жирный 😀 текст** и *курсив* 👨\u200d👩\u200d👧 " + "😀" * 700 + " конец."
    parts = reply_parts("\n\n".join([paragraph] * 8), "markdown")
    assert len(parts) >= 2
    for part in parts:
        _valid(part)
        assert "**" not in part.text
        assert part.text.startswith("Жирный 😀 текст") and part.text.endswith("конец.")
        assert _covered(part, "bold")[0] == "Жирный 😀 текст"
    emoji = reply_parts("**" + "😀" * 5000 + "**", "markdown")
    assert [utf16_len(p.text) for p in emoji] == [4096, 4096, 1808]
    for part in emoji:
        _valid(part)
        assert _covered(part, "bold") == [part.text]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "**",
                "*",
                "_",
                "`",
                "```",
                "```py\n",
                "\n",
                "\n\n",
                "> ",
                "# ",
                "- ",
                "[a](",
                ")",
                "https://e.org/(x)",
                "|",
                "<b>",
                "😀",
                "\u200d",
                "word",
                " ",
                "Слово",
                "~~",
            ]
        ),  # fmt: skip
        max_size=120,
    ),
    st.integers(min_value=8, max_value=200),
)
def test_every_rendered_part_is_one_telegram_accepts(pieces: list[str], limit: int) -> None:
    text = "".join(pieces)
    whole = render_markdown(text)
    parts = reply_parts(text, "markdown")
    shown = whole.text if split_part(whole) else text  # as written when it renders empty
    assert _squash("".join(p.text for p in parts)) == _squash(shown)
    for part in split_part(whole, limit):
        assert part.text.strip() and utf16_len(part.text) <= limit
        assert entities_problem(part.text, _dicts(part)) is None
    for part in parts:
        _valid(part)
