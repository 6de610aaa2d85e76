"""Settings read once from the environment and `.env`, validated at start."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import platformdirs
from dotenv import dotenv_values
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from src.model_windows import Window, WindowBook


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("tgagent"))


IntList = Annotated[list[int], NoDecode]
# Model name -> its context limit (None: MODEL_CONTEXT_LIMITS or the default).
ModelChoices = Annotated[dict[str, int | None], NoDecode]


class ModelPrice(BaseModel):
    """What one model costs, in US dollars per million tokens (MODEL_PRICES)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(0.0, ge=0)
    cached_input: float | None = Field(None, ge=0)
    """Prompt tokens the endpoint read from its cache; None: the `input` price."""
    output: float = Field(0.0, ge=0)
    audio_minute: float = Field(0.0, ge=0)
    """Per minute of transcribed audio (speech-to-text models)."""


# Settings whose variable set but left empty means "off", not "the default" (every other
# empty variable counts as unset).
EMPTY_MEANS_OFF = ("transcribe_model",)


class _EmptyMeansOff(PydanticBaseSettingsSource):
    """Give EMPTY_MEANS_OFF's settings "" where the environment (or else `.env`) sets them
    empty: the other sources skip empty variables."""

    def __init__(self, settings_cls: type[BaseSettings], env_file: object) -> None:
        super().__init__(settings_cls)
        self.env_file = env_file
        """The `.env` file the dotenv source reads (None: none)."""

    def get_field_value(self, field: object, field_name: str) -> tuple[object, str, bool]:
        return None, field_name, False  # unused: __call__ answers for all fields at once

    def __call__(self) -> dict[str, object]:
        env_file = self.env_file
        path = Path(str(env_file)) if isinstance(env_file, str | Path) else None
        dotenv = dotenv_values(path, encoding="utf-8") if path and path.is_file() else {}
        layers: list[dict[str, str | None]] = [
            {k.lower(): v for k, v in os.environ.items()},
            {k.lower(): v for k, v in dotenv.items()},
        ]
        found: dict[str, object] = {}
        for name in EMPTY_MEANS_OFF:
            values = next((layer for layer in layers if name in layer), {})
            if name in values and not (values[name] or "").strip():
                found[name] = ""
        return found


class Settings(BaseSettings):
    """Every knob of tgagent; see `.env.example` for one line per variable."""

    # env_ignore_empty: `TELEGRAM_BOT_TOKEN=` left blank in `.env` means unset, not "".
    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        env_ignore_empty=True,
    )

    # --- database ---
    database_url: SecretStr | None = None
    pg_host: str | None = None
    pg_port: int = Field(5432, ge=1, le=65535)
    pg_db: str = "ai_db"
    pg_user: str = "postgres"
    pg_password: SecretStr | None = None
    pg_pool_min: int = Field(1, ge=1)
    pg_pool_max: int = Field(10, ge=1)
    pg_connect_timeout: float = Field(10.0, gt=0)
    tgagent_data_dir: Path = Field(default_factory=_default_data_dir)

    # --- conversation memory ---
    max_context: int = Field(30, ge=1)
    max_storage: int = Field(0, ge=0)
    timezone: str = "Europe/Moscow"
    max_tasks: int = Field(20, ge=0)
    """Active scheduled tasks an owner may have (issue 35)."""
    min_task_interval: float = Field(3600.0, ge=1)
    """Seconds: a repeating task runs at most this often."""
    time_label: str = ""
    """The time stamp's label for everybody; empty: the user's language's."""
    default_language: Literal["ru", "en"] = "ru"
    """The bot's language for users whose Telegram sends no language code."""
    max_input_chars: int = Field(16_000, ge=100)
    token_counter: Literal["auto", "tiktoken", "approx"] = "auto"

    # --- model ---
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    summary_model: str | None = None
    compact_model: str | None = None
    llm_timeout: float = Field(60.0, gt=0)
    llm_max_retries: int = Field(2, ge=0)
    llm_max_output_tokens: int = Field(1024, ge=16)
    llm_token_limit_param: Literal["auto", "max_tokens", "max_completion_tokens"] = "auto"
    llm_temperature: float = Field(0.7, ge=0, le=2)
    max_tool_rounds: int = Field(10, ge=1)
    # --- tools from MCP servers (docs/tools.md) ---
    mcp_config: Path | None = None
    mcp_tool_timeout: float = Field(30.0, gt=0)
    mcp_result_chars: int = Field(20_000, ge=100)
    model_choices: ModelChoices = Field(default_factory=dict)
    fallback_model: str | None = None

    # --- context engineering (seed 002) ---
    model_context_limits: dict[str, int] = Field(default_factory=dict)
    default_context_limit: int = Field(16_000, ge=512)
    budget_system: float = Field(0.10, gt=0, le=1)
    budget_facts: float = Field(0.10, ge=0, le=1)
    budget_summary: float = Field(0.20, ge=0, le=1)
    budget_working: float = Field(0.60, gt=0, le=1)
    context_selection: Literal["recent", "scored"] = "recent"
    summary_trigger: int = Field(10, ge=1)
    window_step: int = Field(1, ge=1)
    memory_retry_seconds: float = Field(5.0, ge=0)
    memory_waits_for_replies: Literal["auto", "always", "never"] = "auto"
    """Memory model calls wait until no reply is being made (auto: a local endpoint)."""
    memory_idle_seconds: float = Field(0.5, ge=0)
    memory_call_seconds: float = Field(120.0, gt=0)
    memory_max_output_tokens: int = Field(2048, ge=64)
    summary_strategy: Literal["summarize", "semantic", "keyvalue"] = "summarize"
    facts_objective_mode: Literal["auto", "always", "never"] = "auto"
    max_facts_in_prompt: int = Field(30, ge=0)
    facts_every: int = Field(10, ge=1)
    max_facts: int = Field(200, ge=1)
    structured_output: Literal["auto", "off"] = "auto"

    # --- history search (semantic part) ---
    embedding_provider: Literal["local", "openai", "off"] = "local"
    embedding_model: str | None = None
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_timeout: float = Field(30.0, gt=0)
    embedding_batch: int = Field(32, ge=1, le=2048)
    search_semantic_weight: float = Field(3.0, ge=0)

    # --- across sessions (seed 001) ---
    session_idle_minutes: float = Field(180.0, gt=0)
    max_compacts: int = Field(5, ge=1)
    compacts_in_prompt: int = Field(3, ge=0, le=5)

    # --- FRS (seed 003) ---
    frs_numbering: Literal["relative", "absolute"] = "relative"

    # --- telegram ---
    telegram_bot_token: SecretStr | None = None
    telegram_api_base_url: str | None = None
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(8443, ge=1, le=65535)
    webhook_secret_token: SecretStr | None = None
    allowed_user_ids: IntList = Field(default_factory=list)
    admin_user_ids: IntList = Field(default_factory=list)
    user_rate_limit: int = Field(20, ge=0)
    remind_after_hours: float = Field(24.0, gt=0)
    remind_check_minutes: float = Field(10.0, gt=0)
    telegram_reply_format: Literal["plain", "markdown"] = "markdown"
    stream_replies: bool = True

    # --- media: voice notes, photos, documents (issue 17) ---
    transcribe_model: str = "whisper-1"
    transcribe_base_url: str | None = None
    transcribe_api_key: SecretStr | None = None
    transcribe_timeout: float = Field(120.0, gt=0)
    max_voice_seconds: int = Field(600, ge=1)
    vision: bool = False
    max_document_mb: float = Field(10.0, gt=0)
    document_tokens: int = Field(0, ge=0)
    document_read_seconds: float = Field(30.0, gt=0)
    document_read_mb: int = Field(512, ge=128)

    # --- delivery: the inbox queue and its workers (issue 15) ---
    worker_concurrency: int = Field(8, ge=1)
    worker_stalled_seconds: float = Field(30.0, ge=2)
    turn_wait_limit: float = Field(1800.0, gt=0)

    # --- usage and budgets (issue 18) ---
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict)
    user_daily_tokens: int = Field(0, ge=0)
    user_monthly_tokens: int = Field(0, ge=0)
    # --- budgets in dollars, per person in groups, and their warning (issue 34) ---
    user_daily_usd: float = Field(0.0, ge=0)
    user_monthly_usd: float = Field(0.0, ge=0)
    budget_warn_at: float = Field(0.8, ge=0, lt=1)

    # --- devtools ---
    checkpoint_keep: int = Field(50, ge=1)
    log_level: str = "INFO"

    # --- devtools web page (issue 20) ---
    web_token: SecretStr | None = None

    _windows: WindowBook | None = PrivateAttr(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            dotenv_settings,
            _EmptyMeansOff(settings_cls, getattr(dotenv_settings, "env_file", None)),
            file_secret_settings,
        )

    @model_validator(mode="after")
    def _check_storage(self) -> Settings:
        # Fewer kept messages than the window plus a summarizer batch would delete
        # messages before they could ever be summarized.
        least = self.max_context + self.summary_trigger
        if 0 < self.max_storage < least:
            raise ValueError(
                f"MAX_STORAGE={self.max_storage} is too small: use 0 (keep everything) or at "
                f"least MAX_CONTEXT + SUMMARY_TRIGGER = {least}"
            )
        return self

    @field_validator("allowed_user_ids", "admin_user_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: object) -> object:
        if isinstance(value, str):
            return [int(part) for part in value.replace(";", ",").split(",") if part.strip()]
        if isinstance(value, int):
            return [value]
        return value

    @field_validator("model_choices", mode="before")
    @classmethod
    def _parse_choices(cls, value: object) -> object:
        """Accept a JSON object (name -> context limit or null), a JSON list of names, or
        names separated by commas."""
        if not isinstance(value, str):
            return _choices_of(value)
        text = value.strip()
        if text.startswith(("{", "[")):
            try:
                return _choices_of(json.loads(text))
            except ValueError:
                raise ValueError("is not valid JSON") from None
        return dict.fromkeys(name.strip() for name in text.split(",") if name.strip())

    @field_validator("database_url", mode="after")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        raw = value.get_secret_value()
        if "://" not in raw and "=" in raw:
            # libpq's key=value form ("host=... dbname=..."), as psycopg accepts it
            import psycopg  # here, not at start: `tgagent --help` loads no driver

            try:
                psycopg.conninfo.conninfo_to_dict(raw)
            except psycopg.ProgrammingError:
                raise ValueError("is not a valid key=value connection string") from None
            return value
        parts = urlsplit(raw)
        try:
            parts.port  # noqa: B018 - raises ValueError on a port outside 0-65535
        except ValueError:
            raise ValueError("has an invalid port") from None
        if parts.scheme not in ("postgresql", "postgres") or not (parts.hostname or parts.path):
            raise ValueError("must look like postgresql://user@host:port/dbname")
        return value

    @field_validator("webhook_secret_token", mode="after")
    @classmethod
    def _check_secret_token(cls, value: SecretStr | None) -> SecretStr | None:
        # Telegram's setWebhook accepts 1-256 of these characters and nothing else.
        allowed = re.compile(r"[A-Za-z0-9_-]{1,256}")
        if value is not None and not allowed.fullmatch(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and -")
        return value

    @field_validator("timezone")
    @classmethod
    def _check_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @property
    def zone(self) -> ZoneInfo:
        """Return the configured time zone."""
        return ZoneInfo(self.timezone)

    @property
    def uses_embedded_db(self) -> bool:
        """Tell whether no server is configured, so the embedded one is used."""
        return self.database_url is None and not self.pg_host

    def server_dsn(self) -> str | None:
        """Return the configured server's DSN, or None for the embedded server."""
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        if not self.pg_host:
            return None
        password = self.pg_password.get_secret_value() if self.pg_password else None
        import psycopg

        # make_conninfo quotes and escapes: spaces, quotes, `=` and backslashes survive.
        return psycopg.conninfo.make_conninfo(
            "",
            host=self.pg_host,
            port=self.pg_port,
            dbname=self.pg_db,
            user=self.pg_user,
            password=password or None,
        )

    def context_limit(self, model: str) -> int:
        """Return the tokens a request to `model` is planned within (see `window`)."""
        return self.window(model).planned

    def window(self, model: str) -> Window:
        """Return the context window of `model` and where it came from.

        A limit set in MODEL_CONTEXT_LIMITS or MODEL_CHOICES wins, unless the server
        refused a request as too long for a smaller window; else what the server said
        (asked at start, or in a refused request's error); else DEFAULT_CONTEXT_LIMIT.
        """
        known = self._windows.get(self.openai_base_url, model) if self._windows else None
        limit = self.model_context_limits.get(model) or self.model_choices.get(model)
        if limit:
            if known is not None and known.source == "error" and known.planned < limit:
                return known
            return Window(limit, "setting")
        return known or Window(self.default_context_limit, "default")

    @property
    def windows(self) -> WindowBook | None:
        """The windows the model servers told (None: none asked; the settings' limits)."""
        return self._windows

    def use_windows(self, book: WindowBook) -> None:
        """Plan requests within the windows of `book` (and its copies' too: a copy of
        these settings shares it)."""
        self._windows = book

    @property
    def choices(self) -> list[str]:
        """Return the models a user may pick with /model: LLM_MODEL first, then
        MODEL_CHOICES in their order."""
        return list(dict.fromkeys([self.llm_model, *self.model_choices]))

    @property
    def token_limit_param(self) -> Literal["max_tokens", "max_completion_tokens"]:
        """Return the request field that caps a reply on the configured endpoint.

        OpenAI deprecated `max_tokens` for `max_completion_tokens` (and its reasoning models
        reject `max_tokens`); llama.cpp's server, Ollama, vLLM and other OpenAI-compatible
        servers may ignore `max_completion_tokens` and run to the end of the context. So
        `auto` sends `max_completion_tokens` to OpenAI itself and `max_tokens` elsewhere.
        """
        if self.llm_token_limit_param != "auto":
            return self.llm_token_limit_param
        if not self.openai_base_url:
            return "max_completion_tokens"
        host = urlsplit(self.openai_base_url).hostname or ""
        return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    @property
    def transcription_on(self) -> bool:
        """Tell whether voice notes are transcribed (TRANSCRIBE_MODEL empty or "off": no)."""
        return self.transcribe_model.strip().lower() not in ("", "off", "none")

    @property
    def effective_summary_model(self) -> str:
        return self.summary_model or self.llm_model

    @property
    def effective_compact_model(self) -> str:
        return self.compact_model or self.summary_model or self.llm_model


def _choices_of(value: object) -> object:
    """Turn a decoded MODEL_CHOICES (a list of names, or name -> limit) into name -> limit."""
    if isinstance(value, list):
        return dict.fromkeys(str(name).strip() for name in value if str(name).strip())
    return value


WEBHOOK_SECRET_MISSING = (
    "WEBHOOK_SECRET_TOKEN is not set: a webhook without it lets anyone who finds the URL act"
    " as any user; set it to a long random string (letters, digits, _ and -)"
)


def model_configured(settings: Settings) -> bool:
    """Tell whether an endpoint is configured (a key, or a base URL for local servers)."""
    return settings.openai_api_key is not None or bool(settings.openai_base_url)


class ConfigError(RuntimeError):
    """A setting is missing or wrong; the message names the variable."""


def load_settings(**overrides: object) -> Settings:
    """Read settings, turning validation errors into one clear line per variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            message = str(err["msg"]).removeprefix("Value error, ")
            # Errors about one variable name it; errors about several say it themselves.
            lines.append(f"{str(err['loc'][0]).upper()}: {message}" if err["loc"] else message)
        raise ConfigError("invalid configuration: " + "; ".join(lines)) from None
    except SettingsError as exc:
        # pydantic-settings fails before validation when a JSON-valued variable does not parse.
        match = re.search(r'field "(\w+)"', str(exc))
        name = match.group(1).upper() if match else "?"
        raise ConfigError(f"invalid configuration: {name}: not valid JSON") from None
