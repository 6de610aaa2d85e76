-- Issue 18: the model a user (or a group) picked with /model; NULL = LLM_MODEL.
ALTER TABLE users ADD COLUMN model TEXT;
