"""API token scopes (read, publish, submit, admin) and server-side dashboard sessions.

Tokens that exist before this revision get `read publish submit`: whatever they did before they still
do, except listing, creating and revoking tokens (`admin`). A publishing client's token thereby stops
being an admin credential; an operator mints an admin token with the local CLI, which has database
access: `blocktune token create NAME --scope admin`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00
"""
from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: Union[str, None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

EXISTING_TOKENS_SCOPES = "read publish submit"


def upgrade() -> None:
    # the server default fills the rows already there, then goes: a token made later must say its scopes
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.add_column(sa.Column('scopes', sa.String(length=64), nullable=False,
                                      server_default=EXISTING_TOKENS_SCOPES))
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.alter_column('scopes', server_default=None)

    op.create_table('dashboard_sessions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_hash', sa.String(length=64), nullable=False),
    sa.Column('token_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['token_id'], ['api_tokens.id'], name=op.f('fk_dashboard_sessions_token_id_api_tokens'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dashboard_sessions')),
    sa.UniqueConstraint('session_hash', name=op.f('uq_dashboard_sessions_session_hash'))
    )
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_dashboard_sessions_token_id'), ['token_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('dashboard_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_dashboard_sessions_token_id'))
    op.drop_table('dashboard_sessions')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_column('scopes')
