-- Every call of an MCP server's tool (src/graph/mcp/tools.py): what the usage reports
-- count, and the record that makes a call happen once. A turn run again (its worker
-- died, its update came back) or replayed finds the call it made by the turn's stored
-- user message and the call's key (the tool, its arguments, and which such call of the
-- turn it is) and gets the recorded result instead of calling the tool again.
-- A row is claimed ('running') before the call is sent and finished after it: a row
-- left 'running' is a call whose answer was lost with its process, never sent again.
CREATE TABLE mcp_calls (
    id         BIGSERIAL PRIMARY KEY,
    at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    owner_id   BIGINT NOT NULL,
    -- The turn's stored user message: the calls go with it (/new, /erase).
    message_id BIGINT REFERENCES messages (id) ON DELETE CASCADE,
    call_key   TEXT NOT NULL,
    server     TEXT NOT NULL,
    tool       TEXT NOT NULL,
    outcome    TEXT NOT NULL DEFAULT 'running'
        CHECK (outcome IN ('running', 'ok', 'error', 'timeout', 'stopped', 'down')),
    ms         REAL,
    -- What the model was given (the tool's text, or the sentence saying what failed).
    result     TEXT,
    UNIQUE (message_id, call_key)
);
-- The usage reports: an owner's calls, everyone's calls of a period.
CREATE INDEX mcp_calls_owner_at_idx ON mcp_calls (owner_id, at);
CREATE INDEX mcp_calls_at_idx ON mcp_calls (at);

-- Like every owner table, a row written for a group's old id follows its move (0034).
CREATE TRIGGER follow_chat_move BEFORE INSERT ON mcp_calls
    FOR EACH ROW EXECUTE FUNCTION follow_chat_move_owner();
