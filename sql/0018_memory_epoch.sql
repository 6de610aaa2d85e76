-- Deletion that deletes (issue 31): a memory epoch per owner. Every delete of memory (a
-- fact, a compact, /memory clear, /erase) moves the owner to a new epoch, holding the
-- owner's row; memory work that started before it (a summary fold, fact extraction, a
-- session compact, the facts of a kept text; in this process or another) reads the epoch
-- when it starts and writes only while the epoch is still that one, in the same
-- transaction (`SELECT ... FOR SHARE` of the owner's row): otherwise it drops its result.
-- Epochs come from one sequence, never from a counter per owner: /erase deletes the
-- owner's row, and the row their next message creates must not start at an epoch that
-- work still in flight holds.
CREATE SEQUENCE memory_epochs;
ALTER TABLE users ADD COLUMN memory_epoch BIGINT NOT NULL DEFAULT nextval('memory_epochs');
