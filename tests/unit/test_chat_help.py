"""The terminal chat's /help names the terminal's own commands, /exit among them, and none
that only the Telegram bot has."""

from __future__ import annotations

import re

import pytest

from src.cli.chat import EXIT_COMMANDS, answer_line
from src.services.texts import t
from src.services.turn_types import Identity

# What the terminal chat answers itself (src/cli/chat.py: answer_line, and the loop's exits).
TERMINAL_COMMANDS = {"/new", "/forget", "/memory", "/tools", "/export", "/erase", "/help"}
TERMINAL_COMMANDS |= EXIT_COMMANDS


@pytest.mark.parametrize("lang", ["ru", "en"])
async def test_the_terminal_help_names_only_what_the_terminal_does(lang: str) -> None:
    # /help needs no service: it is answered before anything is read or stored.
    text = await answer_line(None, Identity(1, language_code=lang), "/help")  # type: ignore[arg-type]
    assert text == t("help_terminal", lang) != t("help", lang)
    named = set(re.findall(r"/[a-z]+", text))
    assert "/exit" in named and named <= TERMINAL_COMMANDS
    assert not {"/tasks", "/stop", "/tz", "/model", "/usage", "/compress"} & named


@pytest.mark.parametrize("lang", ["ru", "en"])
async def test_the_terminal_help_says_what_ctrl_c_does(lang: str) -> None:
    text = await answer_line(None, Identity(1, language_code=lang), "/help")  # type: ignore[arg-type]
    assert "Ctrl+C" in text
