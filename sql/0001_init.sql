-- tgagent data model (DESIGN.md "Data model"; seeds 000, 001, 003, 004).

CREATE TABLE users (
    telegram_user_id      BIGINT PRIMARY KEY,
    username              TEXT,
    first_name            TEXT,
    language_code         TEXT,
    -- seed 000: NULL = last MAX_CONTEXT messages, 0 = none, N = last min(N, MAX_CONTEXT)
    active_messages_count INTEGER CHECK (active_messages_count IS NULL OR active_messages_count >= 0),
    -- seed 000: '0' = reminders off; anything else = on
    remind_of_yourself    TEXT NOT NULL DEFAULT '1',
    last_seen_at          TIMESTAMPTZ,
    last_reminded_at      TIMESTAMPTZ,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE conversations (
    id                  UUID PRIMARY KEY,
    telegram_user_id    BIGINT NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    ended_at            TIMESTAMPTZ,
    -- rolling summary of messages that left the working window (seed 002)
    summary             TEXT NOT NULL DEFAULT '',
    summary_upto_id     BIGINT NOT NULL DEFAULT 0,
    -- seed 003 variant 1: next absolute message number in this conversation
    next_message_number INTEGER NOT NULL DEFAULT 1,
    last_message_at     TIMESTAMPTZ
);
CREATE INDEX conversations_user_created_idx ON conversations (telegram_user_id, created_at DESC);

CREATE TABLE messages (
    id              BIGSERIAL PRIMARY KEY,
    conversation_id UUID NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    number          INTEGER NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content         TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- seed 003: squashed messages stay, marked, and never enter a context again
    squashed_at     TIMESTAMPTZ,
    squash_id       BIGINT,
    -- tool calls / tool call id for assistant and tool messages, as JSON
    meta            JSONB,
    UNIQUE (conversation_id, number)
);
-- per-turn queries: the last N live messages of one conversation, newest first
CREATE INDEX messages_conv_live_idx ON messages (conversation_id, created_at DESC, id DESC)
    WHERE squashed_at IS NULL;
CREATE INDEX messages_conv_id_idx ON messages (conversation_id, id);

CREATE TABLE facts (
    id                     BIGSERIAL PRIMARY KEY,
    telegram_user_id       BIGINT NOT NULL,
    key                    TEXT NOT NULL,
    value                  TEXT NOT NULL,
    type                   TEXT NOT NULL CHECK (type IN ('fact', 'preference', 'hypothesis', 'constraint')),
    importance             SMALLINT NOT NULL DEFAULT 5 CHECK (importance BETWEEN 1 AND 10),
    source_conversation_id UUID,
    previous_value         TEXT,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (telegram_user_id, key)
);
CREATE INDEX facts_user_importance_idx ON facts (telegram_user_id, importance DESC);

CREATE TABLE session_compacts (
    id               BIGSERIAL PRIMARY KEY,
    telegram_user_id BIGINT NOT NULL,
    conversation_id  UUID,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    summary          TEXT NOT NULL,
    topics           TEXT[] NOT NULL DEFAULT '{}',
    last_action      TEXT NOT NULL DEFAULT '',
    UNIQUE (conversation_id)
);
CREATE INDEX session_compacts_user_idx ON session_compacts (telegram_user_id, created_at DESC);

-- seed 003's "discarded log": what each compression replaced
CREATE TABLE squash_log (
    id                  BIGSERIAL PRIMARY KEY,
    conversation_id     UUID NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    replaced_ids        BIGINT[] NOT NULL,
    replaced_numbers    INTEGER[] NOT NULL,
    summary_message_id  BIGINT,
    summary             TEXT NOT NULL,
    requested_by        TEXT NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);
