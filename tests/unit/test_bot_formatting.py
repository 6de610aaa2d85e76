"""Splitting replies at Telegram's limit, and rendering the model's Markdown as HTML."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from src.bot.formatting import (
    TELEGRAM_LIMIT,
    markdown_to_html,
    split_markdown,
    split_message,
    utf16_len,
)


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


def test_split_markdown_keeps_code_blocks_closed() -> None:
    text = "Intro\n\n```python\n" + "print('hello')\n" * 600 + "```\nDone."
    chunks = split_markdown(text)
    assert len(chunks) >= 3
    for chunk in chunks:
        assert chunk.count("```") % 2 == 0
        assert utf16_len(chunk) <= TELEGRAM_LIMIT
    assert chunks[1].startswith("```python\n")
    assert "<pre><code" in markdown_to_html(chunks[1])


def test_markdown_to_html() -> None:
    html = markdown_to_html(
        "# Title\n**bold** and `a<b>` and [site](https://e.com/?a=1&b=2) ~~old~~\n"
        "2*3*4 <tag> & so on\n```py\nif a < b:\n    pass\n```\ntail **open"
    )
    assert html.startswith("<b>Title</b>\n<b>bold</b> and <code>a&lt;b&gt;</code>")
    assert '<a href="https://e.com/?a=1&amp;b=2">site</a> <s>old</s>' in html
    assert "2*3*4 &lt;tag&gt; &amp; so on" in html
    assert '<pre><code class="language-py">if a &lt; b:\n    pass</code></pre>' in html
    assert html.endswith("tail **open")


def test_markdown_to_html_unclosed_block_and_no_markup() -> None:
    assert markdown_to_html("```\ncode <x>") == "<pre><code>code &lt;x&gt;</code></pre>"
    assert markdown_to_html("plain text") == "plain text"
    visible = re.sub(r"<[^>]+>", "", markdown_to_html("**a** `b` [c](http://d)"))
    assert visible == "a b c"
