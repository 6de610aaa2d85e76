-- Issue 15: every accepted update is stored before Telegram is told it arrived, and every
-- reply is stored before it is sent. The job that processes an update is procrastinate's
-- (0011), deferred in the transaction that stores the update.
CREATE TABLE inbox (
    update_id   BIGINT PRIMARY KEY,          -- a redelivered update finds its row and stops
    chat_id     BIGINT,
    payload     TEXT NOT NULL,               -- the Update's JSON, ASCII-escaped: jsonb
                                             -- cannot hold a NUL a message may carry
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    message_id  BIGINT,                      -- the user's message this update stored
    done_at     TIMESTAMPTZ
);
CREATE INDEX inbox_done_idx ON inbox (done_at) WHERE done_at IS NOT NULL;

-- One reply per update. `sent_ids` are the Telegram message ids of the parts already
-- accepted, so a resend after a crash starts at the first part not sent.
CREATE TABLE outbox (
    update_id  BIGINT PRIMARY KEY,             -- the update it answers (see inbox)
    chat_id    BIGINT NOT NULL,
    thread_id  BIGINT,
    reply_to   BIGINT,                       -- the message quoted (groups)
    text       TEXT NOT NULL,
    fmt        TEXT NOT NULL,                -- markdown | plain
    status     TEXT NOT NULL DEFAULT 'pending'
               CHECK (status IN ('pending', 'sent', 'blocked', 'rejected', 'failed')),
    sent_ids   BIGINT[] NOT NULL DEFAULT '{}',
    attempts   INTEGER NOT NULL DEFAULT 0,
    error      TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at    TIMESTAMPTZ
);
CREATE INDEX outbox_pending_idx ON outbox (created_at) WHERE status = 'pending';

-- procrastinate wakes its workers when a job is inserted, not when a job's lock is freed:
-- the next message of a chat whose turn just ended would wait for the next poll. Wake
-- them when a job that held a lock ends (deleted or finished) and another job waits for
-- that lock, with the notification procrastinate's workers listen for.
CREATE FUNCTION tgagent_notify_lock_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status = 'doing' THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM procrastinate_jobs WHERE lock = OLD.lock AND status = 'todo') THEN
        PERFORM pg_notify(
            'procrastinate_queue_v1#' || OLD.queue_name,
            json_build_object('type', 'job_inserted', 'job_id', OLD.id)::text
        );
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tgagent_jobs_lock_released
    AFTER DELETE OR UPDATE OF status ON procrastinate_jobs
    FOR EACH ROW WHEN (OLD.status = 'doing' AND OLD.lock IS NOT NULL)
    EXECUTE FUNCTION tgagent_notify_lock_released();
