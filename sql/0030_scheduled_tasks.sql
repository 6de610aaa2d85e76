-- Issue 35: tasks the user asks for ("remind me tomorrow at 9:00", "every Friday at 18:00
-- ask me what I finished"), each run exactly once per slot.
--
-- A task's next slot waits as a procrastinate job (task `tgagent.task_due`, scheduled at
-- the slot, queueing lock `task:<id>`). When it comes due, one transaction claims the slot
-- (`task_runs`' primary key: a second worker, or the same job run again after its worker
-- died, finds it claimed), stores the run in the inbox under a negative update_id (the
-- chat's job runs it like a message: its stored note and its reply in the outbox are
-- kept across a crash) and defers the task's next slot.
CREATE TABLE scheduled_tasks (
    id            BIGSERIAL PRIMARY KEY,
    owner_id      BIGINT NOT NULL,        -- whose memory the run uses: a user, or a group
    topic_id      BIGINT NOT NULL DEFAULT 0,
    language_code TEXT,
    instruction   TEXT NOT NULL,          -- the user's words, never a system instruction
    repeat        TEXT,                   -- a cron expression in `timezone`; NULL: once
    timezone      TEXT NOT NULL,
    next_at       TIMESTAMPTZ,            -- the slot waiting; NULL once done or cancelled
    status        TEXT NOT NULL DEFAULT 'active'
                  CHECK (status IN ('active', 'done', 'cancelled')),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX scheduled_tasks_owner_idx ON scheduled_tasks (owner_id) WHERE status = 'active';

CREATE SEQUENCE task_run_updates;
CREATE TABLE task_runs (
    task_id   BIGINT NOT NULL REFERENCES scheduled_tasks (id) ON DELETE CASCADE,
    slot      TIMESTAMPTZ NOT NULL,
    owner_id  BIGINT NOT NULL,
    -- The run's inbox row (minus the sequence's value: Telegram's ids are positive).
    update_id BIGINT NOT NULL UNIQUE DEFAULT -nextval('task_run_updates'),
    late      BOOLEAN NOT NULL DEFAULT false,
    outcome   TEXT NOT NULL CHECK (outcome IN ('run', 'muted', 'refused')),
    at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, slot)
);
