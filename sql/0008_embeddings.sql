-- search_history (issue 13): semantic search over message embeddings.
--
-- Every user and assistant message that is searchable (it has a search_vector) gets an
-- embedding in the background after it is stored; `embedded` marks the messages done, so
-- the pending ones are found through a small partial index however long the history is.
-- A vector is the model's L2-normalized embedding as little-endian float16 (2 bytes a
-- dimension: 768 bytes for multilingual-e5-small), ranked in process over one owner's
-- candidates. `model` says which model made it: after EMBEDDING_MODEL changes, search
-- uses only the new model's vectors while the old ones are replaced in the background.
ALTER TABLE messages ADD COLUMN embedded BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX messages_embed_pending_idx ON messages (id)
    WHERE NOT embedded AND search_vector IS NOT NULL;

CREATE TABLE message_embeddings (
    message_id BIGINT PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    owner_id   BIGINT NOT NULL,
    model      TEXT NOT NULL,
    vector     BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- One owner's newest vectors of one model, read backwards from the newest.
CREATE INDEX message_embeddings_owner_idx ON message_embeddings (owner_id, model, message_id DESC);
