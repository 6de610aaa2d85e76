-- search_history (issue 13): an index that starts from the owner, and term statistics.
--
-- Each user or assistant message carries `search_vector`: the lexemes of its searchable
-- text (search_text(), no time stamp), each prefixed with the owner's id (`42|кошк`), with
-- their positions. One GIN index over it then holds a posting list per owner and word, so
-- a search reads only its owner's postings, however many other users there are; the
-- positions give term frequencies and lengths for BM25. (btree_gin, which could index
-- (owner, tsvector) directly, is not available on the embedded server.)
ALTER TABLE messages ADD COLUMN owner_id BIGINT, ADD COLUMN search_vector tsvector;

CREATE FUNCTION owner_search_vector(owner BIGINT, content TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (
        SELECT coalesce(string_agg(
            '''' || replace(replace(owner::text || '|' || lexeme, '\', '\\'), '''', '''''')
                || ''':' || array_to_string(positions, ','),
            ' '), '')::tsvector
        FROM unnest(to_tsvector('russian', search_text(content)))
    );

-- Set on insert, whoever inserts (the service, a squash, COPY in benchmarks).
CREATE FUNCTION messages_search_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner_id IS NULL THEN
        SELECT telegram_user_id INTO NEW.owner_id FROM conversations WHERE id = NEW.conversation_id;
    END IF;
    IF NEW.role IN ('user', 'assistant')
       AND NOT (NEW.meta IS NOT NULL AND NEW.meta ? 'frs_summary') THEN
        NEW.search_vector := owner_search_vector(NEW.owner_id, NEW.content);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER messages_search_fill BEFORE INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION messages_search_fill();

UPDATE messages m SET owner_id = c.telegram_user_id
FROM conversations c WHERE c.id = m.conversation_id;
UPDATE messages SET search_vector = owner_search_vector(owner_id, content)
WHERE role IN ('user', 'assistant') AND NOT (meta IS NOT NULL AND meta ? 'frs_summary');

DROP INDEX messages_fts_idx;
CREATE INDEX messages_search_idx ON messages USING gin (search_vector)
    WHERE search_vector IS NOT NULL;

-- One query term of an owner: the same quoting as the vector, `:*` for a prefix.
CREATE FUNCTION owner_term(owner BIGINT, lexeme TEXT, prefix BOOLEAN) RETURNS tsquery
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (
        '''' || replace(replace(owner::text || '|' || lexeme, '\', '\\'), '''', '''''') || ''''
            || CASE WHEN prefix THEN ':*' ELSE '' END
    )::tsquery;
