"""Through Telegram: a failure waiting cannot fix (a model window smaller than the system
prompt, a refused key) is said as such, with its fix, in the user's language; a window the
server teaches by refusing is used at once, and the user gets an answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from src.services.texts import t
from tests.e2e.conftest import CHAT_MODEL
from tests.fakes.bot_api_server import FakeBotAPI
from tests.fakes.openai_windows import prompt_tokens

ANN = 9811


async def test_a_window_too_small_is_said_with_its_fix_in_the_users_language(
    start_bot: Any, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    llm.flavour, llm.window = "llama.cpp", 300
    await start_bot(tgagent_data_dir=tmp_path)
    tg.push_text(ANN, "привет", language_code="ru")
    [reply] = await tg.await_messages(ANN, 1)
    assert "300 токенов" in reply["text"] and "llama-server -c 8192" in reply["text"]
    assert reply["text"] != t("model_error", "ru")


async def test_a_refused_key_is_said_with_its_fix(
    start_bot: Any, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    await start_bot(tgagent_data_dir=tmp_path)
    llm.fail_next(1, 401)
    tg.push_text(ANN, "hello", language_code="en")
    [reply] = await tg.await_messages(ANN, 1)
    assert reply["text"] == t("model_auth_refused", "en", status=401)


async def test_a_window_learned_from_a_refusal_answers_the_same_turn(
    start_bot: Any, tg: FakeBotAPI, llm: Any, tmp_path: Path
) -> None:
    llm.flavour, llm.window = "llama-cpp-python", 2400
    llm.default_reply = "fits now"
    await start_bot(tgagent_data_dir=tmp_path)
    tg.push_text(ANN, "hello " * 300, language_code="en")
    [reply] = await tg.await_messages(ANN, 1)
    assert reply["text"] == "fits now"
    sizes = [prompt_tokens(r) for r in llm.requests if r["model"] == CHAT_MODEL]
    assert sizes[0] >= 2400 > sizes[-1], sizes  # refused first, then planned within
