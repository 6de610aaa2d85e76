"""The SQL of history search (src/storage/search_repo.py): the query's terms, their
statistics, the candidates of each term, the hits with their neighbours, and the
substring fallback."""

# Lexical search is BM25 over the owner's own index (sql/0007_search_owner.sql): every
# user and assistant message carries its lexemes prefixed with its owner's id, so each
# query term reads one owner's posting list. Words are stemmed (English for Latin
# letters, Russian otherwise) with no stop words dropped, and CJK runs are indexed as
# character bigrams (search_words(), sql/0020_recall_defects.sql); the time stamp is not
# searchable text.
#
# The query's content words, each with the lexemes it stems to. Stop words depend on the
# language: the query's is the one whose stop-word list covers most of its words (ties:
# the order listed), and only that language's stop words are dropped. An
# English or Russian stop word can be a content word elsewhere (Spanish "once", eleven).
QUERY_TERMS = """
WITH w AS (
    SELECT w.word, lower(w.word) AS low, w.n
    FROM unnest(%s::text[]) WITH ORDINALITY AS w(word, n)
), lang AS (
    SELECT l.name FROM unnest(ARRAY[
        -- PostgreSQL's snowball dictionaries that have a stop-word list; ties: this order
        'english', 'russian', 'danish', 'dutch', 'finnish', 'french', 'german', 'hungarian',
        'italian', 'norwegian', 'portuguese', 'spanish', 'swedish', 'turkish'
    ]) WITH ORDINALITY AS l(name, n)
    JOIN w ON ts_lexize((l.name || '_stem')::regdictionary, w.low) = '{}'
    GROUP BY l.name, l.n ORDER BY count(*) DESC, l.n LIMIT 1
)
SELECT w.word, array(SELECT lexeme FROM unnest(search_words(w.word))) AS lexemes
FROM w LEFT JOIN lang ON true
WHERE lang.name IS NULL OR ts_lexize((lang.name || '_stem')::regdictionary, w.low) <> '{}'
ORDER BY w.n
"""
# Document frequency per term, counted up to a cap (a term in more messages than that is
# common: its weight is near zero anyway), and the owner's message count.
TERM_STATS = """
SELECT t.n, (
    SELECT count(*) FROM (
        SELECT 1 FROM messages m
        WHERE m.search_vector @@ owner_term(%(user)s, t.lexeme, t.prefix) LIMIT %(cap)s
    ) d
) AS df
FROM unnest(%(lexemes)s::text[], %(prefixes)s::bool[]) WITH ORDINALITY AS t(lexeme, prefix, n)
UNION ALL
SELECT 0, coalesce(sum(next_message_number - 1), 0) FROM conversations
WHERE telegram_user_id = %(user)s
"""
# Candidates: a term's newest `per_term` matching messages (all of a rare term's), with
# their vectors. A bare LIMIT over the postings returned the OLDEST matches (they come
# back in the table's physical order). A term matched by fewer than DF_CAP messages
# reads its postings and keeps the newest; a more common one reads the owner's newest
# COMMON_SCAN messages from the newest back (messages_owner_recent_idx) and stops at
# `per_term` matches, so its cost never grows with the history.
CANDIDATES_RARE = """
SELECT DISTINCT c.id, c.vector, c.created_at FROM
unnest(%(lexemes)s::text[], %(prefixes)s::bool[]) AS t(lexeme, prefix),
LATERAL (
    SELECT m.id, m.search_vector::text AS vector, m.created_at FROM messages m
    WHERE m.search_vector @@ owner_term(%(user)s, t.lexeme, t.prefix)
      AND m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
      AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
      AND (%(scope)s::uuid[] IS NULL OR m.conversation_id = ANY(%(scope)s::uuid[]))
    ORDER BY m.id DESC LIMIT %(per_term)s
) c
"""
CANDIDATES_COMMON = """
SELECT DISTINCT c.id, c.vector, c.created_at FROM
unnest(%(lexemes)s::text[], %(prefixes)s::bool[]) AS t(lexeme, prefix),
LATERAL (
    SELECT m.id, m.search_vector::text AS vector, m.created_at FROM (
        SELECT m.id, m.search_vector, m.created_at, m.role, m.conversation_id FROM messages m
        WHERE m.owner_id = %(user)s AND m.search_vector IS NOT NULL
        ORDER BY m.id DESC LIMIT %(scan)s
    ) m
    WHERE m.search_vector @@ owner_term(%(user)s, t.lexeme, t.prefix)
      AND m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
      AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
      AND (%(scope)s::uuid[] IS NULL OR m.conversation_id = ANY(%(scope)s::uuid[]))
    ORDER BY m.id DESC LIMIT %(per_term)s
) c
"""
COMMON_SCAN = 20000
# Whether a user's message made the bot search the history: a search_history call among
# the assistant's messages of its turn (before the next user message; the tool calls are
# in meta, src/graph/nodes.py). Such a message is the user asking about the history, not
# what the history holds. Reads a few rows of the conversation's (conversation_id,
# number) index.
SEARCHED = """
(m.role = 'user' AND EXISTS (
    SELECT 1 FROM messages t
    WHERE t.conversation_id = m.conversation_id
      AND t.number > m.number AND t.number <= m.number + 12
      AND t.role = 'assistant' AND t.meta -> 'tool_calls' @> '[{"name": "search_history"}]'
      AND NOT EXISTS (
          SELECT 1 FROM messages u
          WHERE u.conversation_id = m.conversation_id AND u.role = 'user'
            AND u.number > m.number AND u.number < t.number
      )
))"""
# The hits themselves, each with the next user or assistant message of its conversation
# (a question's answer is often the next message).
HITS = f"""
SELECT m.id, m.conversation_id, m.number, m.role, m.content, m.created_at,
       m.squashed_at IS NOT NULL AS squashed, {SEARCHED} AS searched,
       nb.role AS next_role, nb.number AS next_number, nb.content AS next_content
FROM messages m
LEFT JOIN LATERAL (
    SELECT n.role, n.number, n.content FROM messages n
    WHERE n.conversation_id = m.conversation_id AND n.id > m.id
      AND n.role IN ('user', 'assistant')
      AND NOT (n.meta IS NOT NULL AND n.meta ? 'frs_summary')
    ORDER BY n.id LIMIT 1
) nb ON true
WHERE m.id = ANY(%(ids)s) AND m.owner_id = %(user)s
"""
DF_CAP = 5000
PER_TERM = 300

# No searchable word (a code, a symbol): the phrase as a substring of the owner's newest
# SUBSTRING_SCAN messages only, so the cost never grows with the history.
SEARCH_SUBSTRING = """
SELECT m.id FROM (
    SELECT m.id FROM messages m
    WHERE m.owner_id = %(user)s AND m.search_vector IS NOT NULL
    ORDER BY m.id DESC LIMIT %(scan)s
) recent JOIN messages m ON m.id = recent.id
WHERE m.role = ANY(%(roles)s) AND m.id <> %(exclude)s
  AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
  AND (%(scope)s::uuid[] IS NULL OR m.conversation_id = ANY(%(scope)s::uuid[]))
  -- the plain match first: it is cheap, and only its rare hits pay for search_text()
  AND m.content ILIKE %(pattern)s AND search_text(m.content) ILIKE %(pattern)s
ORDER BY m.created_at DESC, m.id DESC LIMIT %(limit)s
"""
SUBSTRING_SCAN = 5000
# A search in a scope (a topic's conversations): which of the owner's embedded messages
# are in it.
IN_SCOPE = "SELECT id FROM messages WHERE id = ANY(%s) AND conversation_id = ANY(%s::uuid[])"
