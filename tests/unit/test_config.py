"""Settings: defaults, parsing from the environment, one clear line per wrong value."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import platformdirs
import psycopg
import pytest

from src.cli.logging_setup import RedactSecrets, configure_logging, secrets_of
from src.config import ConfigError, Settings, load_settings

ENV_NAMES = [name.upper() for name in Settings.model_fields] + ["TEST_DATABASE_URL"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Hide the developer's environment and any `.env` in the working directory."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def load(**overrides: object) -> Settings:
    return load_settings(_env_file=None, **overrides)


def config_error(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> str:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load()
    message = str(info.value)
    assert "\n" not in message
    assert name in message
    return message


def test_defaults() -> None:
    s = load()
    assert (s.max_context, s.max_storage) == (30, 0)
    assert (s.pg_pool_min, s.pg_pool_max) == (1, 10)
    assert (s.pg_port, s.pg_db, s.pg_user) == (5432, "ai_db", "postgres")
    assert s.pg_host is None and s.pg_password is None and s.database_url is None
    assert s.timezone == "Europe/Moscow" and s.zone.key == "Europe/Moscow"
    assert s.tgagent_data_dir == Path(platformdirs.user_data_dir("tgagent"))
    assert s.allowed_user_ids == [] and s.model_context_limits == {}
    assert s.telegram_bot_token is None and s.openai_api_key is None
    assert s.uses_embedded_db and s.server_dsn() is None


def test_env_file_in_working_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("MAX_CONTEXT=12\n", encoding="utf-8")
    assert load_settings().max_context == 12
    assert load().max_context == 30


def test_an_empty_transcribe_model_turns_transcription_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load().transcribe_model == "whisper-1" and load().transcription_on
    # In the environment: empty (or "off") means off, where other empty variables are unset.
    monkeypatch.setenv("TRANSCRIBE_MODEL", "")
    monkeypatch.setenv("MODEL_CONTEXT_LIMITS", "")
    assert not load().transcription_on and load().model_context_limits == {}
    monkeypatch.setenv("TRANSCRIBE_MODEL", "off")
    assert not load().transcription_on
    monkeypatch.delenv("TRANSCRIBE_MODEL")
    # In `.env` too, unless the environment sets it.
    (tmp_path / ".env").write_text("TRANSCRIBE_MODEL=\n", encoding="utf-8")
    assert not load_settings().transcription_on
    assert load().transcription_on  # `.env` not read
    monkeypatch.setenv("TRANSCRIBE_MODEL", "gpt-4o-mini-transcribe")
    assert load_settings().transcribe_model == "gpt-4o-mini-transcribe"


@pytest.mark.parametrize(
    ("value", "choices", "limits"),
    [
        ("gpt-4.1, llama3:8b", ["gpt-4o-mini", "gpt-4.1", "llama3:8b"], [16_000, 16_000]),
        ('["gpt-4.1"]', ["gpt-4o-mini", "gpt-4.1"], [16_000]),
        ('{"gpt-4.1": 1000000, "llama3:8b": null}', ["gpt-4o-mini", "gpt-4.1", "llama3:8b"],
         [1_000_000, 16_000]),
        ("gpt-4o-mini,gpt-4.1", ["gpt-4o-mini", "gpt-4.1"], [16_000]),
    ],
)  # fmt: skip
def test_model_choices_come_with_llm_model_first_and_their_limits(
    monkeypatch: pytest.MonkeyPatch, value: str, choices: list[str], limits: list[int]
) -> None:
    monkeypatch.setenv("MODEL_CHOICES", value)
    s = load()
    assert s.choices == choices
    assert [s.context_limit(name) for name in choices[1:]] == limits
    monkeypatch.setenv("MODEL_CONTEXT_LIMITS", '{"gpt-4.1": 64000}')
    assert "gpt-4.1" not in choices or load().context_limit("gpt-4.1") == 64_000


def test_model_choices_that_are_not_json_name_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert "MODEL_CHOICES" in config_error(monkeypatch, "MODEL_CHOICES", '{"gpt-4.1": 1000')


def test_env_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOWED_USER_IDS", "1,2")
    monkeypatch.setenv("ADMIN_USER_IDS", "7")
    monkeypatch.setenv("MODEL_CONTEXT_LIMITS", '{"gpt-4o-mini": 128000, "local": 8192}')
    monkeypatch.setenv("max_context", "12")
    monkeypatch.setenv("TIMEZONE", "UTC")
    monkeypatch.setenv("TGAGENT_DATA_DIR", "/tmp/tga-data")
    s = load()
    assert s.allowed_user_ids == [1, 2]
    assert s.admin_user_ids == [7]
    assert s.model_context_limits == {"gpt-4o-mini": 128000, "local": 8192}
    assert s.context_limit("local") == 8192
    assert s.context_limit("unknown") == s.default_context_limit
    assert s.max_context == 12
    assert s.zone.key == "UTC"
    assert s.tgagent_data_dir == Path("/tmp/tga-data")


def test_empty_id_list_and_spaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOWED_USER_IDS", " 1 , 2 ;3,")
    assert load().allowed_user_ids == [1, 2, 3]
    monkeypatch.setenv("ALLOWED_USER_IDS", "")
    assert load().allowed_user_ids == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MAX_CONTEXT", "-3"),
        ("MAX_CONTEXT", "thirty"),
        ("MAX_STORAGE", "-1"),
        ("PG_PORT", "70000"),
        ("PG_POOL_MAX", "0"),
        ("DATABASE_URL", "mysql://x"),
        ("DATABASE_URL", "not a url"),
        ("DATABASE_URL", "postgresql://u@h:99999/db"),
        ("TIMEZONE", "Mars/Olympus_Mons"),
        ("ALLOWED_USER_IDS", "1,x"),
        ("MODEL_CONTEXT_LIMITS", "{not json"),
        ("SUMMARY_STRATEGY", "guess"),
    ],
)
def test_wrong_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    message = config_error(monkeypatch, name, value)
    assert message.startswith("invalid configuration: ")


def test_malformed_database_url_does_not_echo_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = config_error(monkeypatch, "DATABASE_URL", "mysql://u:hunter2secret@h/db")
    assert "hunter2secret" not in message


def test_two_wrong_values_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_CONTEXT", "-3")
    monkeypatch.setenv("TIMEZONE", "Nowhere/City")
    with pytest.raises(ConfigError) as info:
        load()
    message = str(info.value)
    assert "MAX_CONTEXT" in message and "TIMEZONE" in message and "\n" not in message


def test_database_url_selects_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://bob:pw@db.example:6543/app"
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("PG_HOST", "ignored.example")
    s = load()
    assert not s.uses_embedded_db
    assert s.server_dsn() == url
    assert "pw" not in repr(s.database_url)


def test_empty_database_url_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "")
    s = load()
    assert s.database_url is None and s.uses_embedded_db


def test_server_dsn_from_pg_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_HOST", "db.local")
    monkeypatch.setenv("PG_PORT", "6543")
    monkeypatch.setenv("PG_DB", "memory")
    monkeypatch.setenv("PG_USER", "agent")
    monkeypatch.setenv("PG_PASSWORD", "s3cret")
    s = load()
    assert not s.uses_embedded_db
    dsn = s.server_dsn()
    assert dsn is not None
    assert psycopg.conninfo.conninfo_to_dict(dsn) == {
        "host": "db.local",
        "port": "6543",
        "dbname": "memory",
        "user": "agent",
        "password": "s3cret",
    }


@pytest.mark.parametrize(
    "password", ["two words", "it's", 'say "hi"', "a=b", "back\\slash", "  padded  ", "x' y='z"]
)
def test_server_dsn_keeps_any_password(monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    monkeypatch.setenv("PG_HOST", "db.local")
    monkeypatch.setenv("PG_USER", "agent smith")
    monkeypatch.setenv("PG_PASSWORD", password)
    dsn = load().server_dsn()
    assert dsn is not None
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    assert info["password"] == password
    assert (info["host"], info["user"], info["dbname"]) == ("db.local", "agent smith", "ai_db")


def test_server_dsn_without_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_HOST", "127.0.0.1")
    dsn = load().server_dsn()
    assert dsn is not None
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    assert "password" not in info
    assert (info["port"], info["dbname"], info["user"]) == ("5432", "ai_db", "postgres")


def test_model_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_MODEL", "main")
    s = load()
    assert s.effective_summary_model == "main" and s.effective_compact_model == "main"
    monkeypatch.setenv("SUMMARY_MODEL", "cheap")
    s = load()
    assert s.effective_summary_model == "cheap" and s.effective_compact_model == "cheap"


def test_blank_values_mean_unset(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TELEGRAM_BOT_TOKEN=\nOPENAI_BASE_URL=\nMAX_CONTEXT=\n")
    s = load_settings()
    assert s.telegram_bot_token is None and s.openai_base_url is None
    assert s.max_context == 30


# --- .env.example: every variable, with its default ---

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"
EXAMPLE_LINE = re.compile(r"^# ([A-Z][A-Z0-9_]*)=(.*)$")


def example_entries() -> dict[str, str]:
    entries = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = EXAMPLE_LINE.match(line)
        if match:
            entries[match.group(1)] = match.group(2)
    return entries


def test_env_example_lists_every_setting() -> None:
    names = {name.upper() for name in Settings.model_fields}
    assert set(example_entries()) == names


def test_env_example_shows_the_defaults(tmp_path: Path) -> None:
    uncommented = "".join(f"{k}={v}\n" for k, v in example_entries().items())
    (tmp_path / "example.env").write_text(uncommented, encoding="utf-8")
    from_example = load_settings(_env_file=tmp_path / "example.env")
    assert from_example.model_dump() == load().model_dump()


def test_env_example_speaks_to_users() -> None:
    """No labels of the project's history (its seeds, its issues) in what users read."""
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    assert not re.search(r"\bseed[ -]?\d{3}\b|\bissues?\s+#?\d+|\(#\d+\)", text, re.IGNORECASE)


def test_env_example_every_entry_has_a_comment() -> None:
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if EXAMPLE_LINE.match(line):
            above = lines[i - 1]
            assert above.startswith("# ") and not EXAMPLE_LINE.match(above), line


# --- logging: secrets never reach a log line ---

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("t", logging.INFO, __file__, 1, msg, args, None)


def test_redact_masks_configured_secrets() -> None:
    s = load(
        telegram_bot_token=TOKEN,
        openai_api_key="sk-test-abcdef123456",
        database_url="postgresql://u:dbpassword99@h/db",
    )
    redact = RedactSecrets(secrets_of(s))
    record = _record("key=%s token=%s pw=%s", "sk-test-abcdef123456", TOKEN, "dbpassword99")
    assert redact.filter(record)
    text = record.getMessage()
    assert "sk-test-abcdef123456" not in text
    assert TOKEN not in text
    assert "dbpassword99" not in text
    assert text.count("***") == 3


def test_redact_masks_bot_url_tokens_even_unconfigured() -> None:
    redact = RedactSecrets([])
    record = _record("POST https://api.telegram.org/bot%s/getUpdates", TOKEN)
    redact.filter(record)
    assert record.getMessage() == "POST https://api.telegram.org/bot***/getUpdates"
    file_url = _record(f"GET https://api.telegram.org/file/bot{TOKEN}/photos/1.jpg")
    redact.filter(file_url)
    assert TOKEN not in file_url.getMessage()


def test_redact_leaves_clean_records_alone() -> None:
    record = _record("turn user=%s ms=%d", 42, 17)
    RedactSecrets(["longsecret"]).filter(record)
    assert record.args == (42, 17) and record.getMessage() == "turn user=42 ms=17"


def test_redact_masks_secrets_in_exception_text_and_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = load(pg_host="db.local", pg_password="pw with spaces'9")
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        configure_logging("info", s)
        try:
            raise RuntimeError(f"cannot connect: {s.server_dsn()} (pw with spaces'9)")
        except RuntimeError:
            logging.getLogger("tgagent.test").error("connecting failed", exc_info=True)
        err = capsys.readouterr().err
        assert "connecting failed" in err and "Traceback" in err and "RuntimeError" in err
        assert "pw with spaces" not in err and "***" in err
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


def test_configure_logging_redacts_every_line(capsys: pytest.CaptureFixture[str]) -> None:
    s = load(openai_api_key="sk-live-zzzzzzzz9999")
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        configure_logging("info", s)
        logging.getLogger("tgagent.test").info("calling with key %s", "sk-live-zzzzzzzz9999")
        logging.getLogger("httpx").info("https://api.telegram.org/bot%s/getMe", TOKEN)
        err = capsys.readouterr().err
        assert "calling with key ***" in err
        assert "sk-live-zzzzzzzz9999" not in err and TOKEN not in err
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


def test_max_storage_below_window_plus_trigger_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # It would delete messages before they could ever be summarized (issue 12).
    monkeypatch.setenv("MAX_STORAGE", "35")
    with pytest.raises(ConfigError) as info:
        load()
    message = str(info.value)
    assert message == (
        "invalid configuration: MAX_STORAGE=35 is too small: use 0 (keep everything) or at "
        "least MAX_CONTEXT + SUMMARY_TRIGGER = 40"
    )
    monkeypatch.setenv("MAX_STORAGE", "40")
    assert load().max_storage == 40
    monkeypatch.setenv("MAX_STORAGE", "0")
    assert load().max_storage == 0


def test_session_idle_minutes_accepts_fractions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSION_IDLE_MINUTES", "0.05")
    assert load().session_idle_minutes == 0.05
    monkeypatch.setenv("SESSION_IDLE_MINUTES", "0")
    with pytest.raises(ConfigError, match="SESSION_IDLE_MINUTES"):
        load()


# Names of settings that hold a credential: each must be a SecretStr (hidden in repr) and
# is then masked in every log line by `secrets_of`, which reads them off the model.
SECRET_NAME = re.compile(r"(key|token|password|secret)$|^database_url$")


def test_every_secret_setting_is_a_secret_str() -> None:
    names = [n for n in Settings.model_fields if SECRET_NAME.search(n)]
    assert "transcribe_api_key" in names and "embedding_api_key" in names
    values = {name: f"{name}-value-{i}x" for i, name in enumerate(names)}
    values["database_url"] = "postgresql://u:dbpassword99@h/db"
    s = load(**values)
    for name in names:
        secret = getattr(s, name)
        assert type(secret).__name__ == "SecretStr", f"{name} is not a SecretStr"
        assert secret.get_secret_value() not in repr(s)


def test_every_secret_setting_is_masked_in_log_lines_and_tracebacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = [n for n in Settings.model_fields if SECRET_NAME.search(n) and n != "database_url"]
    values = {name: f"{name}-value-{i}x" for i, name in enumerate(names)}
    s = load(**values)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        configure_logging("info", s)
        log = logging.getLogger("tgagent.test")
        for name, value in values.items():
            log.info("%s is %s", name, value)
            try:
                raise RuntimeError(f"the endpoint refused {value}")
            except RuntimeError:
                log.error("calling with %s failed", name, exc_info=True)
        err = capsys.readouterr().err
        assert "Traceback" in err and "transcribe_api_key is ***" in err
        for name, value in values.items():
            assert value not in err, f"{name} leaked"
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


def test_webhooks_listen_on_the_loopback_address_by_default() -> None:
    assert load().webhook_listen == "127.0.0.1"


@pytest.mark.parametrize("value", ["has space", "semi;colon", "x" * 257, "ключ"])
def test_a_webhook_secret_telegram_would_refuse_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    config_error(monkeypatch, "WEBHOOK_SECRET_TOKEN", value)
