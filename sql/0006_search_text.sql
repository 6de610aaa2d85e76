-- search_history (issue 13): what is searched of a message is its text, not the time stamp
-- in front of user messages (`[Текущее время: 2026-11-23 02:54] `), which made "время",
-- "2026" or "23" match every user message. One function says what the searchable text is;
-- the index and the search query both use it, so they always agree.
CREATE FUNCTION search_text(content TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN regexp_replace(content, '^\[[^]\n]{1,60}: \d{4}-\d\d-\d\d \d\d:\d\d\] ?', '');

DROP INDEX messages_fts_idx;
CREATE INDEX messages_fts_idx ON messages USING gin (to_tsvector('russian', search_text(content)))
    WHERE role IN ('user', 'assistant');
