-- A group upgraded to a supergroup gets a new chat id, and its memory moves there
-- (src/storage/chat_moves.py). The move is recorded here, and a row written for the old id
-- afterwards follows it: the usage rows, embeddings and compacts written in the background
-- after the group's last turn, by this process or another. Only groups move (negative ids).
CREATE TABLE chat_moves (
    old_id   BIGINT PRIMARY KEY,
    new_id   BIGINT NOT NULL,
    moved_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Before a group's row is inserted: wait for a move of the group under way (it holds the
-- group's `users` row, and a move changes its key, which conflicts with KEY SHARE), then
-- give the row the group's new id if it moved. A move that starts later finds this row
-- (it waits for this transaction, holding the same lock). Taking the owner's row after
-- the conversation's keeps the order of src/storage/epochs.py. Named so that it runs
-- before messages_search_fill (triggers run in name order): the search vector is made
-- with the new id.
CREATE FUNCTION follow_chat_move(owner BIGINT) RETURNS BIGINT
    LANGUAGE plpgsql AS $$
DECLARE
    moved BIGINT;
BEGIN
    IF owner IS NULL OR owner >= 0 THEN
        RETURN owner;
    END IF;
    PERFORM 1 FROM users WHERE telegram_user_id = owner FOR KEY SHARE;
    SELECT new_id INTO moved FROM chat_moves WHERE old_id = owner;
    RETURN coalesce(moved, owner);
END $$;

CREATE FUNCTION follow_chat_move_user() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.telegram_user_id := follow_chat_move(NEW.telegram_user_id);
    RETURN NEW;
END $$;

CREATE FUNCTION follow_chat_move_owner() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.owner_id := follow_chat_move(NEW.owner_id);
    RETURN NEW;
END $$;

-- Every table with an owner column (as src/storage/erasure_repo.py finds them), but the
-- turn leases (a lease is the holding process's, and ends with it). A table added later
-- gets the trigger in its own migration (tests/integration/test_chat_moves.py checks).
DO $$
DECLARE
    t RECORD;
BEGIN
    FOR t IN
        SELECT c.table_name, c.column_name FROM information_schema.columns c
        JOIN information_schema.tables tb
          ON tb.table_schema = c.table_schema AND tb.table_name = c.table_name
        WHERE c.table_schema = current_schema() AND tb.table_type = 'BASE TABLE'
          AND c.column_name IN ('telegram_user_id', 'owner_id')
          AND c.table_name <> 'turn_leases'
    LOOP
        EXECUTE format(
            'CREATE TRIGGER follow_chat_move BEFORE INSERT ON %I'
            ' FOR EACH ROW EXECUTE FUNCTION %I()',
            t.table_name,
            CASE t.column_name WHEN 'owner_id' THEN 'follow_chat_move_owner'
                               ELSE 'follow_chat_move_user' END
        );
    END LOOP;
END $$;
