-- search_history (issue 36): a question naming only a day ("what happened yesterday?",
-- "что было вчера?") lists that day's messages, newest first. The owner's searchable
-- messages by time: the listing reads the day's rows straight from the index, so its
-- cost is the day's, not that of every message written since.
CREATE INDEX messages_owner_time_idx ON messages (owner_id, created_at DESC, id DESC)
    WHERE search_vector IS NOT NULL;
