-- Issue 16: a turn that finds the owner's lease held by another process asks for it. The
-- holder's memory work after a reply (summary, facts) then gives way, as it does to a turn
-- of its own process; a new holder starts unasked.
ALTER TABLE turn_leases ADD COLUMN wanted BOOLEAN NOT NULL DEFAULT false;
