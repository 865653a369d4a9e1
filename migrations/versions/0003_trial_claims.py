"""Trial claims: the trial budget of a job shared by several workers, admitted trial by trial.

A worker sharing a job claims each trial it is about to measure (tuner/trial_claims.py): the claim
is admitted, in one short transaction on the job's row, only while the trials recorded and the
claimed trials still in flight leave room in the budget. It replaces the job-wide lock the workers
took in turns around counting the budget and asking Optuna. No rows to fill: jobs running during
the upgrade have none and are admitted from their next trial on.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26 18:40:21
"""
from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: Union[str, None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('trial_claims',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('study_trial_id', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_trial_claims_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_trial_claims')),
    sa.UniqueConstraint('job_id', 'number', name=op.f('uq_trial_claims_job_id_number')),
    sa.UniqueConstraint('study_trial_id', name=op.f('uq_trial_claims_study_trial_id'))
    )


def downgrade() -> None:
    op.drop_table('trial_claims')
