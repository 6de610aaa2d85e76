-- Recall defects (issue 36): the embedding queue and language-aware search words.
--
-- 1. The model the stored vectors should be made by, remembered once. A worker compares
--    the configured model with it at start and gives other models' vectors back to the
--    queue only after a change (`requeue`), instead of looking for them on every turn
--    (`WHERE model <> ...` has no index: a scan of every owner's vectors).
CREATE TABLE embedding_state (
    id      BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
    model   TEXT NOT NULL,
    requeue BOOLEAN NOT NULL
);

-- 2. A message the embedding provider refuses (its input, not the provider, is at fault)
--    is marked here and left: it no longer holds the queue. Queued again after a model
--    change; deleted with its message.
CREATE TABLE embedding_failures (
    message_id BIGINT PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    model      TEXT NOT NULL,
    error      TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- 3. The queue per owner: owners with pending messages are found by skipping through this
--    index, and each owner's newest pending messages are read from it, so one owner's
--    backlog never holds another's new messages. Only the user's messages are embedded:
--    what a user said is what semantic search looks for, the reply after it comes along
--    as its neighbour, and lexical search still ranks replies; a reply is four times a
--    user message's length, so embedding it cost most of a turn's background CPU.
CREATE INDEX messages_embed_owner_pending_idx ON messages (owner_id, id)
    WHERE NOT embedded AND search_vector IS NOT NULL AND role = 'user';
DROP INDEX messages_embed_pending_idx;

-- 4. Search words. Stop words are a fact about a query's language, so the index keeps
--    every word (English and Russian stems, no stop-word list) and the query drops the
--    stop words of its own language only (src/storage/search_repo.py): "once" is an
--    English stop word but the Spanish for "eleven". CJK text has no spaces: a run of
--    characters was one lexeme, so a word inside it was never found; it is indexed as
--    overlapping character pairs (bigrams), as the query is.
CREATE TEXT SEARCH DICTIONARY search_english (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH DICTIONARY search_russian (TEMPLATE = snowball, Language = russian);
CREATE TEXT SEARCH CONFIGURATION search_words (COPY = russian);
ALTER TEXT SEARCH CONFIGURATION search_words
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart WITH search_english;
ALTER TEXT SEARCH CONFIGURATION search_words
    ALTER MAPPING FOR word, hword, hword_part WITH search_russian;

-- Han, kana, Hangul and their compatibility forms: scripts written without spaces.
CREATE FUNCTION cjk_bigrams(content TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (
        SELECT coalesce(string_agg(
            CASE WHEN length(r.run) = 1 THEN r.run ELSE (
                SELECT string_agg(substr(r.run, i, 2), ' ' ORDER BY i)
                FROM generate_series(1, length(r.run) - 1) AS i
            ) END, ' '), '')
        FROM regexp_matches(content, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+', 'g')
            AS m(found),
        LATERAL (SELECT m.found[1] AS run) AS r
    );

-- What is indexed of a text: its words, with each CJK run replaced by its bigrams.
CREATE FUNCTION search_words(content TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN to_tsvector('search_words',
        regexp_replace(content, '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+', ' ', 'g')
        || ' ' || cjk_bigrams(content));

CREATE OR REPLACE FUNCTION owner_search_vector(owner BIGINT, content TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (
        SELECT coalesce(string_agg(
            '''' || replace(replace(owner::text || '|' || lexeme, '\', '\\'), '''', '''''')
                || ''':' || array_to_string(positions, ','),
            ' '), '')::tsvector
        FROM unnest(search_words(search_text(content)))
    );

UPDATE messages SET search_vector = owner_search_vector(owner_id, content)
WHERE search_vector IS NOT NULL;
