"""One Alembic revision per file, oldest first; each names the robust-tune version it brings the tables to."""
