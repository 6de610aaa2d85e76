-- Issue 34: per-person budgets in groups, and the 80% warnings.
-- sender_id: who wrote the message of a group turn (NULL in private chats, where the
-- owner is the sender): their own budgets count the call too, as well as the group's.
ALTER TABLE llm_calls ADD COLUMN sender_id BIGINT;
-- A person's spend since a time, by model (the budget check before every model call of a
-- turn): index-only range scans over their own rows and their group turns' rows.
CREATE INDEX llm_calls_owner_spend_idx ON llm_calls (owner_id, at)
    INCLUDE (model, input_tokens, cached_tokens, output_tokens, audio_seconds);
CREATE INDEX llm_calls_sender_spend_idx ON llm_calls (sender_id, at)
    INCLUDE (model, input_tokens, cached_tokens, output_tokens, audio_seconds)
    WHERE sender_id IS NOT NULL;
-- Covered by llm_calls_owner_spend_idx (same keys, more columns): one index to write.
DROP INDEX llm_calls_owner_at_idx;
-- Who was warned that a budget of theirs is 80% spent, per period: warned once. owner_id
-- is the person (or group) whose budget it is: /erase deletes their rows with the rest.
CREATE TABLE budget_warnings (
    owner_id     BIGINT NOT NULL,
    budget       TEXT NOT NULL CHECK (budget IN ('day_tokens', 'month_tokens', 'day_usd',
                     'month_usd')),
    period_start TIMESTAMPTZ NOT NULL,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, budget, period_start)
);
