"""`tgagent db migrate|status|embed`: the schema and the embeddings backfill."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from src.config import Settings


async def _db_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from src.storage.migrations import migrate, require_migrations
    from src.storage.pg_client import open_pool_from_settings

    require_migrations()  # before starting or touching any database
    pool = await open_pool_from_settings(settings)
    try:
        applied = await migrate(pool)
    finally:
        await pool.close()
    if applied:
        for name in applied:
            print(f"applied {name}")  # noqa: T201
    else:
        print("nothing to do: the database is up to date")  # noqa: T201
    return 0


async def _db_status(args: argparse.Namespace, settings: Settings) -> int:
    from src.storage.migrations import applied_versions, discover
    from src.storage.pg_client import open_pool_from_settings

    pool = await open_pool_from_settings(settings)
    try:
        rows = await applied_versions(pool)
    finally:
        await pool.close()
    done = {row["version"] for row in rows}
    for row in rows:
        when = f"{row['applied_at']:%Y-%m-%d %H:%M:%S}"
        print(f"{row['version']:04d}  applied  {when}  {row['name']}")  # noqa: T201
    for mig in discover():
        if mig.version not in done:
            print(f"{mig.version:04d}  pending  {'':19}  {mig.name}")  # noqa: T201
    return 0


async def _db_embed(args: argparse.Namespace, settings: Settings) -> int:
    from src.services.embedding_worker import EmbeddingWorker
    from src.services.embeddings import make_embedder
    from src.storage.embedding_repo import EmbeddingRepository
    from src.storage.migrations import migrate
    from src.storage.pg_client import open_pool_from_settings

    embedder = make_embedder(settings)
    if embedder is None:
        print("EMBEDDING_PROVIDER=off: semantic search is disabled, nothing to embed")  # noqa: T201
        return 0
    pool = await open_pool_from_settings(settings)
    try:
        await migrate(pool)
        repo = EmbeddingRepository(pool)
        before = await repo.counts(embedder.model)
        print(  # noqa: T201
            f"{embedder.model}: {before['embedded']} embedded, {before['pending']} pending, "
            f"{before['other_models']} by another model, {before['refused']} refused"
        )
        if args.status:
            return 0
        worker = EmbeddingWorker(repo, embedder, settings.embedding_batch)
        while done := await worker.run_once():
            print(f"  {worker.embedded} embedded ({done} in the last batch)")  # noqa: T201
        after = await repo.counts(embedder.model)
    finally:
        await pool.close()
    print(f"done: {after['embedded']} embedded, {after['pending']} pending")  # noqa: T201
    return 0


def register(sub: Any, db_sub: Any) -> None:
    """Add `tgagent db migrate`, `db status` and `db embed`."""
    del sub
    db_sub.add_parser("migrate", help="apply pending migrations").set_defaults(handler=_db_migrate)
    db_sub.add_parser("status", help="show applied and pending migrations").set_defaults(
        handler=_db_status
    )
    embed = db_sub.add_parser(
        "embed", help="embed every stored message that has no embedding yet (backfill)"
    )
    embed.add_argument("--status", action="store_true", help="only count, embed nothing")
    embed.set_defaults(handler=_db_embed)
