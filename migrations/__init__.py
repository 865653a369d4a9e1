"""Alembic environment and versions of blocktune's database (driven by db/migrate.py)."""
