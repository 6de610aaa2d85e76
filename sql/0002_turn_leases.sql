-- One turn at a time per memory owner across processes: a lease, renewed while a turn
-- runs and expiring if its process dies. Unlike a session advisory lock it holds no
-- connection for the seconds a model call takes.
CREATE TABLE turn_leases (
    owner_id   BIGINT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
