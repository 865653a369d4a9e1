"""Initial schema: gpus, workers, kernels, jobs, tuning_trials, best_configs, api_tokens.

Revision ID: 0001
Revises: 
Create Date: 2026-11-23 03:59:44.224014
"""
from __future__ import annotations

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op


revision: str = '0001'
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:

    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_table('gpus',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=False),
    sa.Column('compute_capability', sa.String(length=16), nullable=False),
    sa.Column('sm_count', sa.Integer(), nullable=False),
    sa.Column('total_memory', sa.BigInteger(), nullable=False),
    sa.Column('driver_version', sa.String(length=64), nullable=False),
    sa.Column('cuda_version', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpus')),
    sa.UniqueConstraint('model', 'compute_capability', name=op.f('uq_gpus_model_compute_capability'))
    )
    op.create_table('kernels',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('fingerprint', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('compiler_version', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_kernels')),
    sa.UniqueConstraint('fingerprint', name=op.f('uq_kernels_fingerprint'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kernel_id', sa.Integer(), nullable=False),
    sa.Column('gpu_model', sa.String(length=200), nullable=True),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('progress', sa.Double(), nullable=False),
    sa.Column('trials_done', sa.Integer(), nullable=False),
    sa.Column('trials_total', sa.Integer(), nullable=True),
    sa.Column('best_time_ms', sa.Double(), nullable=True),
    sa.Column('best_config', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('idempotency_key', sa.String(length=200), nullable=True),
    sa.Column('study_name', sa.String(length=200), nullable=False),
    sa.Column('claimed_by', sa.String(length=200), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name=op.f('ck_jobs_state')),
    sa.ForeignKeyConstraint(['kernel_id'], ['kernels.id'], name=op.f('fk_jobs_kernel_id_kernels')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('idempotency_key', name=op.f('uq_jobs_idempotency_key'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_kernel_id'), ['kernel_id'], unique=False)
        batch_op.create_index('ix_jobs_state_gpu_model', ['state', 'gpu_model'], unique=False)

    op.create_table('workers',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('gpu_id', sa.Integer(), nullable=True),
    sa.Column('device_index', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("state IN ('idle', 'busy', 'stopped')", name=op.f('ck_workers_state')),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_workers_gpu_id_gpus')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_workers')),
    sa.UniqueConstraint('name', name=op.f('uq_workers_name'))
    )
    op.create_table('best_configs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kernel_fingerprint', sa.String(length=128), nullable=False),
    sa.Column('kernel_name', sa.String(length=200), nullable=False),
    sa.Column('problem_key', sa.Text(), nullable=False),
    sa.Column('gpu_model', sa.String(length=200), nullable=False),
    sa.Column('compute_capability', sa.String(length=16), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('median_ms', sa.Double(), nullable=False),
    sa.Column('default_ms', sa.Double(), nullable=True),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_best_configs_job_id_jobs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_best_configs')),
    sa.UniqueConstraint('kernel_fingerprint', 'problem_key', 'gpu_model', name=op.f('uq_best_configs_kernel_fingerprint_problem_key_gpu_model'))
    )
    op.create_table('tuning_trials',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('samples_ms', sa.JSON(), nullable=False),
    sa.Column('median_ms', sa.Double(), nullable=True),
    sa.Column('spread', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('worker', sa.String(length=200), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("status IN ('ok', 'compile-error', 'runtime-error', 'wrong-result', 'timeout', 'invalid')", name=op.f('ck_tuning_trials_status')),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_tuning_trials_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tuning_trials')),
    sa.UniqueConstraint('job_id', 'number', name=op.f('uq_tuning_trials_job_id_number'))
    )



def downgrade() -> None:

    op.drop_table('tuning_trials')
    op.drop_table('best_configs')
    op.drop_table('workers')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_state_gpu_model')
        batch_op.drop_index(batch_op.f('ix_jobs_kernel_id'))

    op.drop_table('jobs')
    op.drop_table('kernels')
    op.drop_table('gpus')
    op.drop_table('api_tokens')

