"""The fake Bot API's files: their bytes, ids and paths, as Telegram's servers keep them.

Every file a message carries (pushed by a test or sent by the bot) is stored here, so
getFile and the download route answer for it and for nothing else.
"""

from __future__ import annotations

import itertools
import mimetypes
import threading
from dataclasses import dataclass
from typing import Any

# The folder of a file's path on Telegram's servers, by the kind of file.
FOLDERS = {
    "voice": "voice",
    "audio": "music",
    "photo": "photos",
    "document": "documents",
    "sticker": "stickers",
    "video": "videos",
}
# The extension Telegram gives a kind of file when its name and MIME type say nothing.
DEFAULT_EXTENSIONS = {"voice": ".oga", "photo": ".jpg", "sticker": ".webp"}


@dataclass(frozen=True)
class StoredFile:
    """One file as Telegram's servers keep it."""

    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes

    def fields(self) -> dict[str, Any]:
        """Return the fields a message carries for this file."""
        return {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": len(self.data),
        }


class FileStore:
    """Thread-safe storage of files by file_id and by file_path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._by_id: dict[str, StoredFile] = {}
        self._by_path: dict[str, StoredFile] = {}

    def add(
        self,
        data: bytes | None,
        prefix: str = "file",
        file_name: str | None = None,
        mime_type: str | None = None,
    ) -> StoredFile:
        """Store a file of kind `prefix`; without `data`, placeholder bytes naming its id."""
        with self._lock:
            n = next(self._ids)
            file_id = f"{prefix}-file-{n}"
            path = f"{FOLDERS.get(prefix, 'documents')}/file_{n}"
            path += _extension(prefix, file_name, mime_type)
            content = f"fake-file:{file_id}".encode() if data is None else data
            stored = StoredFile(file_id, f"{prefix}-u{n}", path, content)
            self._by_id[file_id] = self._by_path[path] = stored
            return stored

    def get(self, file_id: str) -> StoredFile | None:
        """Return the file with this file_id, if there is one."""
        with self._lock:
            return self._by_id.get(file_id)

    def at(self, file_path: str) -> StoredFile | None:
        """Return the file at this file_path, if there is one."""
        with self._lock:
            return self._by_path.get(file_path)

    def clear(self) -> None:
        """Forget every file."""
        with self._lock:
            self._by_id.clear()
            self._by_path.clear()


def _extension(prefix: str, file_name: str | None, mime_type: str | None) -> str:
    """Return the extension of a stored file's path: from its name, MIME type or kind."""
    if file_name and "." in file_name:
        return "." + file_name.rsplit(".", 1)[-1].lower()
    if prefix in DEFAULT_EXTENSIONS:
        return DEFAULT_EXTENSIONS[prefix]
    return (mimetypes.guess_extension(mime_type) if mime_type else None) or ""


def guess_mime(file_name: str) -> str:
    """Return the MIME type Telegram would give a document by its name."""
    return mimetypes.guess_type(file_name)[0] or "application/octet-stream"
