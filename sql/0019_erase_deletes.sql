-- Issue 31: /erase deletes the chat's inbox rows. Their update ids stay here, bare (no
-- chat, no content), so an update Telegram sends again is still refused; pruned with the
-- inbox (src/storage/delivery_repo.py).
CREATE TABLE inbox_erased (
    update_id BIGINT PRIMARY KEY,
    erased_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX inbox_erased_at_idx ON inbox_erased (erased_at);

-- /erase collapses an owner's model calls into one row per day, model, purpose and status
-- (src/storage/erasure_repo.py): how many calls a row counts.
ALTER TABLE llm_calls ADD COLUMN calls INTEGER NOT NULL DEFAULT 1;
