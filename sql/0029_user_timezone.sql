-- Issue 35: each user's own time zone (an IANA name, `/tz` or the model's set_timezone).
-- NULL: TIMEZONE. Every time the model, /memory, /usage and tasks show is in it.
ALTER TABLE users ADD COLUMN timezone TEXT;
