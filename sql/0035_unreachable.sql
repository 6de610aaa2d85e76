-- Issue 41: a chat Telegram refuses to deliver to (403: the user blocked the bot, the bot
-- left the group) is unreachable, which is not muted: `remind_of_yourself` stays the
-- user's own choice (/mute). The chat's next update clears it.
--
-- While a chat is unreachable nothing is sent to it: reminders stop, a one-time task's
-- answer is held (its outbox row `held`, headed with its due time, and sent again once the
-- chat writes), and a repeating task's slots are counted as missed on the task, for
-- /tasks to say so until one of its answers arrives again.
ALTER TABLE users ADD COLUMN unreachable_since TIMESTAMPTZ;

ALTER TABLE outbox ADD COLUMN held_since TIMESTAMPTZ;
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('pending', 'sent', 'blocked', 'rejected', 'failed', 'held'));
CREATE INDEX outbox_held_idx ON outbox (chat_id) WHERE status = 'held';

ALTER TABLE task_runs DROP CONSTRAINT task_runs_outcome_check;
ALTER TABLE task_runs ADD CONSTRAINT task_runs_outcome_check
    CHECK (outcome IN ('run', 'muted', 'refused', 'missed'));
ALTER TABLE scheduled_tasks ADD COLUMN missed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE scheduled_tasks ADD COLUMN missed_last TIMESTAMPTZ;
