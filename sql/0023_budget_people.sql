-- Issue 34: per-person budgets in groups, and the 80% warnings.
-- sender_id: who wrote the message of a group turn (NULL in private chats, where the
-- owner is the sender): their own budgets count the call too, as well as the group's.
ALTER TABLE llm_calls ADD COLUMN sender_id BIGINT;
-- One person's calls in groups since a time (the budget check of every model call).
CREATE INDEX llm_calls_sender_at_idx ON llm_calls (sender_id, at) WHERE sender_id IS NOT NULL;
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
