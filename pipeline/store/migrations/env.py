"""Alembic's entry point: run the migrations through the connection store.upgrade passes in, inside its
transaction (never a connection of Alembic's own, never a commit of its own)."""
from alembic import context

from pipeline.store.schema import VERSION_TABLE, metadata

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata,
                  version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():  # inside the caller's transaction: commits nothing itself
    context.run_migrations()
