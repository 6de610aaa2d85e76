-- Issue 33: a conversation per topic. In a forum supergroup and in a private chat with
-- topics, each `message_thread_id` is its own conversation; 0 is the General topic and
-- every chat without topics, so every existing conversation is the chat's General one.
ALTER TABLE conversations ADD COLUMN topic_id BIGINT NOT NULL DEFAULT 0;
DROP INDEX conversations_user_created_idx;
CREATE INDEX conversations_owner_topic_idx
    ON conversations (telegram_user_id, topic_id, created_at DESC);

-- A compact belongs to the topic its session came from (seed 001's "Previous
-- conversations" of a topic are that topic's); facts stay the person's.
ALTER TABLE session_compacts ADD COLUMN topic_id BIGINT NOT NULL DEFAULT 0;
UPDATE session_compacts s SET topic_id = c.topic_id
FROM conversations c WHERE c.id = s.conversation_id AND c.topic_id <> 0;
DROP INDEX session_compacts_user_idx;
CREATE INDEX session_compacts_owner_topic_idx
    ON session_compacts (telegram_user_id, topic_id, created_at DESC);

-- Set on insert from the session's conversation, whoever inserts (as messages.owner_id).
CREATE FUNCTION session_compacts_topic_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.conversation_id IS NOT NULL THEN
        SELECT topic_id INTO NEW.topic_id FROM conversations WHERE id = NEW.conversation_id;
        NEW.topic_id := COALESCE(NEW.topic_id, 0);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER session_compacts_topic_fill BEFORE INSERT ON session_compacts
    FOR EACH ROW EXECUTE FUNCTION session_compacts_topic_fill();
