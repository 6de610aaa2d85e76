-- Seed 003 (FRS): a squash replaces a run of messages with one summary message that stands
-- where the run stood. In absolute numbering the summary carries the number of the run's
-- first message (seed example: A1 B2 C3 D4, compress 2-3 -> A1 BC2 D4), while the squashed
-- originals stay in the table with their own numbers for the squash log and search. So a
-- number is unique among the LIVE messages of a conversation, not among all rows; new
-- messages still take fresh numbers from conversations.next_message_number.
ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_conversation_id_number_key;
CREATE UNIQUE INDEX IF NOT EXISTS messages_conv_live_number_idx
    ON messages (conversation_id, number) WHERE squashed_at IS NULL;
-- "was number N squashed?" lookups for the model's error messages (squashed rows included)
CREATE INDEX IF NOT EXISTS messages_conv_number_idx ON messages (conversation_id, number);
CREATE INDEX IF NOT EXISTS squash_log_conv_idx ON squash_log (conversation_id, created_at);
