-- Issue 35: a group's task remembers the member who asked for it, so that its runs are
-- charged to that member's budgets too, as the member's own turns in the group are (issue
-- 34). NULL in a private chat (the owner asked), for a group speaking as itself, and once
-- the member erased what is kept about them (/erase).
ALTER TABLE scheduled_tasks ADD COLUMN requested_by BIGINT;
