-- search_history (issue 13): an owner's newest searchable messages, read from the newest
-- back. The substring fallback scans the owner's newest messages; without this index it
-- walked the primary key backwards past every other owner's newer rows.
CREATE INDEX messages_owner_recent_idx ON messages (owner_id, id DESC)
    WHERE search_vector IS NOT NULL;
