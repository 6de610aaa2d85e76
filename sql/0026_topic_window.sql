-- Issue 33: /forget in a topic forgets that topic only. Seed 000's window count stays
-- `users.active_messages_count` for the General topic and chats without topics; a topic's
-- conversation (topic_id <> 0) keeps its own here (NULL: the last MAX_CONTEXT messages).
ALTER TABLE conversations ADD COLUMN active_messages_count INTEGER
    CHECK (active_messages_count IS NULL OR active_messages_count >= 0);
