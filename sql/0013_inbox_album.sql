-- Issue 17: the photos or files of one album (a Telegram media group) arrive as separate
-- updates; the first one's job gathers the others by this id and answers them as one turn.
ALTER TABLE inbox ADD COLUMN media_group_id TEXT;
CREATE INDEX inbox_album_idx ON inbox (chat_id, media_group_id)
    WHERE media_group_id IS NOT NULL AND done_at IS NULL;
