-- Issue 33: members as themselves. In a group the group owns the conversation and each
-- member owns their facts: a fact row is the owner's (`telegram_user_id`: the user in a
-- private chat, the chat in a group) and, in a group, a member's (`member_id`: the
-- Telegram user id the update carried, never a name from the text) or the group's own
-- (0). Every existing fact keeps member 0: a private chat's stay the user's, a group's
-- stay the group's; nothing is lost.
ALTER TABLE facts ADD COLUMN member_id BIGINT NOT NULL DEFAULT 0;
DROP INDEX facts_current_key_idx;
CREATE UNIQUE INDEX facts_current_key_idx ON facts (telegram_user_id, member_id, key)
    WHERE valid_to IS NULL;
DROP INDEX facts_history_idx;
CREATE INDEX facts_history_idx ON facts (telegram_user_id, member_id, key, valid_to DESC)
    WHERE valid_to IS NOT NULL;
