"""Alembic migrations of the tool's tables: one file per schema revision in versions/, run by store.upgrade."""
