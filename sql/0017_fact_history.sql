-- Facts with a history (issue 31): a changed value closes the row that held the old one
-- instead of overwriting it. A row is one value of a key, valid from its created_at until
-- its valid_to; the current facts are the rows with valid_to NULL, one per owner and key.
-- Deleting a fact (the user's /memory forget, its button, the forget_fact tool, the
-- extractor's `delete`) deletes every row of its key. fact_changes and
-- facts.previous_value, which kept the last change, are folded into these rows.
ALTER TABLE facts ADD COLUMN valid_to TIMESTAMPTZ;
ALTER TABLE facts DROP CONSTRAINT facts_telegram_user_id_key_key;

-- Each logged change becomes the closed row of its old value, valid from the change
-- before it (else from when the key was first learned) until the change itself.
INSERT INTO facts (telegram_user_id, key, value, type, importance, source_conversation_id,
                   created_at, updated_at, valid_to)
SELECT c.telegram_user_id, c.key, c.old_value, f.type, f.importance,
       lag(c.source_conversation_id) OVER w,
       COALESCE(lag(c.changed_at) OVER w, f.created_at), c.changed_at, c.changed_at
FROM fact_changes c
JOIN facts f ON f.telegram_user_id = c.telegram_user_id AND f.key = c.key
WINDOW w AS (PARTITION BY c.telegram_user_id, c.key ORDER BY c.changed_at, c.id);
-- The current value holds since its last change.
UPDATE facts f SET created_at = c.last_change
FROM (
    SELECT telegram_user_id, key, max(changed_at) AS last_change
    FROM fact_changes GROUP BY telegram_user_id, key
) c
WHERE f.telegram_user_id = c.telegram_user_id AND f.key = c.key AND f.valid_to IS NULL;
DROP TABLE fact_changes;
ALTER TABLE facts DROP COLUMN previous_value;

-- Values are one line, whitespace collapsed, at most 200 characters (as
-- memory_repo.fact_value stores them): a value never starts a line of the prompt.
UPDATE facts SET value = CASE
    WHEN char_length(v) <= 200 THEN v ELSE rtrim(left(v, 199)) || '…' END
FROM (SELECT id AS vid, btrim(regexp_replace(value, '\s+', ' ', 'g')) AS v FROM facts) n
WHERE facts.id = n.vid AND facts.value IS DISTINCT FROM
    CASE WHEN char_length(v) <= 200 THEN v ELSE rtrim(left(v, 199)) || '…' END;

-- One current fact per owner and key; the history of a key, newest first.
CREATE UNIQUE INDEX facts_current_key_idx ON facts (telegram_user_id, key) WHERE valid_to IS NULL;
CREATE INDEX facts_history_idx ON facts (telegram_user_id, key, valid_to DESC)
    WHERE valid_to IS NOT NULL;
