-- Long-term memory (seeds 001, 002): history search, the change log of facts, idle sessions.

-- search_history: full text over the user's and the assistant's messages, squashed ones
-- included. The `russian` configuration stems Cyrillic words with the Russian stemmer and
-- ASCII words with the English one, so one index serves both languages. pg_trgm is not
-- available on the embedded server: substring matches fall back to ILIKE over the one
-- user's messages.
CREATE INDEX messages_fts_idx ON messages USING gin (to_tsvector('russian', content))
    WHERE role IN ('user', 'assistant');

-- Facts merge by key: a newer value replaces the old one (facts.previous_value keeps the
-- last); every change is also logged here.
CREATE TABLE fact_changes (
    id                     BIGSERIAL PRIMARY KEY,
    telegram_user_id       BIGINT NOT NULL,
    key                    TEXT NOT NULL,
    old_value              TEXT NOT NULL,
    new_value              TEXT NOT NULL,
    source_conversation_id UUID,
    changed_at             TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX fact_changes_user_idx ON fact_changes (telegram_user_id, changed_at DESC);

-- The idle-session job: conversations silent since a time, not compacted since then
-- (conversations.ended_at = the last message time the session compact covers).
CREATE INDEX conversations_last_message_idx ON conversations (last_message_at);
