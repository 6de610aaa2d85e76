-- Issue 34: the messages a turn sends beside its reply (the "heard" echo of a voice note,
-- the acknowledgement of documents, a sentence per file that could not be read) go
-- through the outbox too, so that a job run again never sends them twice. Each is a row
-- of the update named by `kind`; the reply itself is kind 'reply'.
ALTER TABLE outbox ADD COLUMN kind TEXT NOT NULL DEFAULT 'reply';
ALTER TABLE outbox DROP CONSTRAINT outbox_pkey;
ALTER TABLE outbox ADD PRIMARY KEY (update_id, kind);
