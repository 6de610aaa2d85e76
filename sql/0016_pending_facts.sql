-- Facts /new would lose: the text of each batch of messages not yet fact-extracted, kept
-- when /new wipes the conversation, until its facts are stored (the row is deleted in the
-- same transaction) or the model refuses it for good. A failed try waits until
-- next_attempt_at, set when the try starts (exponential back-off: a try in flight is not
-- taken again by another process). No foreign keys: the conversation no longer exists,
-- and the owner's rows go with /memory clear.
CREATE TABLE pending_facts (
    id                     BIGSERIAL PRIMARY KEY,
    telegram_user_id       BIGINT NOT NULL,
    source_conversation_id UUID NOT NULL,
    text                   TEXT NOT NULL,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    attempts               INTEGER NOT NULL DEFAULT 0,
    next_attempt_at        TIMESTAMPTZ NOT NULL
);
-- The retry job: owners with a text due, the most overdue first.
CREATE INDEX pending_facts_due_idx ON pending_facts (next_attempt_at);
-- One owner's texts in the order they were written (a try, /memory clear).
CREATE INDEX pending_facts_owner_idx ON pending_facts (telegram_user_id, created_at, id);
