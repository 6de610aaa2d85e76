-- Memory that loses nothing (issue 12).
--
-- Progress of the running summary and of fact extraction is a mark on each message, not
-- a message id: messages are read in thread order (created_at, id) while a squash row
-- gets a new, larger id at an early position, so an id cursor skipped or repeated rows.
--   summarized:      the message reached the summarizer (or /forget put it out of the
--                    summary's reach); a squash row inherits it from the rows it replaced.
--   facts_extracted: facts were extracted from it; only user and assistant messages
--                    carry facts, the others are born extracted.
ALTER TABLE messages
    ADD COLUMN summarized BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN facts_extracted BOOLEAN NOT NULL DEFAULT false;

-- What the old id cursor covered was summarized, and facts came from the same batches.
UPDATE messages m SET summarized = true, facts_extracted = true
FROM conversations c
WHERE m.conversation_id = c.id AND m.id <= c.summary_upto_id;
UPDATE messages SET facts_extracted = true
WHERE role NOT IN ('user', 'assistant') AND NOT facts_extracted;

-- Squash summaries are the model's words, never instructions: not the system role.
UPDATE messages SET role = 'assistant' WHERE role = 'system' AND meta ? 'frs_summary';

ALTER TABLE conversations DROP COLUMN summary_upto_id;

-- The summarizer's and the extractor's reads: the few unmarked live rows, in thread order.
CREATE INDEX messages_unsummarized_idx ON messages (conversation_id, created_at, id)
    WHERE squashed_at IS NULL AND NOT summarized;
CREATE INDEX messages_facts_pending_idx ON messages (conversation_id, created_at, id)
    WHERE squashed_at IS NULL AND NOT facts_extracted;

-- Sessions (seed 001): a conversation that goes quiet and resumes has several sessions,
-- each with its own compact, keyed by the time of the session's last message.
ALTER TABLE session_compacts DROP CONSTRAINT session_compacts_conversation_id_key;
CREATE UNIQUE INDEX session_compacts_session_idx ON session_compacts (conversation_id, created_at);
