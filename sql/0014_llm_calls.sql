-- Issue 18: every model call, for /usage, `tgagent usage` and the token budgets.
-- No foreign keys: /new deletes conversations and usage must outlive them; calls of no
-- owner (the embedding worker's batches) have owner_id NULL. turn_id groups the calls of
-- one turn (its reply, tools, summary and facts after it) for "the last turn".
CREATE TABLE llm_calls (
    id              BIGSERIAL PRIMARY KEY,
    at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    owner_id        BIGINT,
    conversation_id UUID,
    turn_id         UUID,
    purpose         TEXT NOT NULL CHECK (purpose IN ('reply', 'summary', 'facts', 'compact',
                        'reminder', 'compress', 'describe', 'embedding', 'transcription')),
    model           TEXT NOT NULL,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    cached_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    audio_seconds   REAL,
    estimated       BOOLEAN NOT NULL DEFAULT false,
    latency_ms      REAL,
    status          TEXT NOT NULL DEFAULT 'ok' CHECK (status IN ('ok', 'error')),
    error_class     TEXT
);
-- One owner's sums since a time (the budget check of every turn, /usage): an index-only
-- range scan over that owner's rows of the period.
CREATE INDEX llm_calls_owner_at_idx ON llm_calls (owner_id, at)
    INCLUDE (input_tokens, output_tokens);
-- Everyone's calls in a period (/usage all, `tgagent usage`).
CREATE INDEX llm_calls_at_idx ON llm_calls (at);
CREATE INDEX llm_calls_turn_idx ON llm_calls (turn_id) WHERE turn_id IS NOT NULL;
