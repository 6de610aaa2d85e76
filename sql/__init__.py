"""The numbered migrations; installed as the package `src.storage.sql` (see pyproject.toml)."""
