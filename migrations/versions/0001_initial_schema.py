"""Initial schema: every table of the data model, for Postgres and SQLite.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 07:10:59.728487
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# JSONB on Postgres, JSON text on SQLite; timestamps always carry a time zone.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
# SQLite only auto-increments INTEGER PRIMARY KEY columns.
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("secret_hash", sa.String(length=128), nullable=False),
        sa.Column("scopes", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("name", name=op.f("uq_api_keys_name")),
        sa.UniqueConstraint("prefix", name=op.f("uq_api_keys_prefix")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("path", sa.String(length=512), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("response", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("key", "actor", name=op.f("pk_idempotency_keys")),
    )
    op.create_index(
        op.f("ix_idempotency_keys_created_at"), "idempotency_keys", ["created_at"], unique=False
    )
    op.create_table(
        "reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("markdown", sa.Text(), nullable=False),
        sa.Column("location", sa.String(length=1024), nullable=True),
        sa.Column("summary", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reports")),
        sa.UniqueConstraint("kind", "period", name=op.f("uq_reports_kind_period")),
    )
    op.create_table(
        "routes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("base_url", sa.String(length=512), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("metrics_url", sa.String(length=512), nullable=True),
        sa.Column(
            "role",
            sa.Enum(
                "baseline",
                "candidate",
                name="route_role",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("spec_method", sa.String(length=32), nullable=True),
        sa.Column("spec_tokens", sa.Integer(), nullable=True),
        sa.Column("draft_model", sa.String(length=256), nullable=True),
        sa.Column("spec_config", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routes")),
        sa.UniqueConstraint("name", name=op.f("uq_routes_name")),
    )
    op.create_table(
        "spans",
        sa.Column("trace_id", sa.String(length=32), nullable=False),
        sa.Column("span_id", sa.String(length=16), nullable=False),
        sa.Column("parent_span_id", sa.String(length=16), nullable=True),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("kind", sa.Integer(), nullable=False),
        sa.Column("service", sa.String(length=128), nullable=True),
        sa.Column("start_time", TIMESTAMP, nullable=False),
        sa.Column("end_time", TIMESTAMP, nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("attributes", JSON, nullable=False),
        sa.Column("resource", JSON, nullable=False),
        sa.Column("received_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "span_id", name=op.f("pk_spans")),
    )
    op.create_index(op.f("ix_spans_start_time"), "spans", ["start_time"], unique=False)
    op.create_table(
        "engine_samples",
        sa.Column("id", BIGID, nullable=False),
        sa.Column("route_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=128), nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("scraped_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["route_id"],
            ["routes.id"],
            name=op.f("fk_engine_samples_route_id_routes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_samples")),
    )
    op.create_index(
        op.f("ix_engine_samples_route_id_metric_scraped_at"),
        "engine_samples",
        ["route_id", "metric", "scraped_at"],
        unique=False,
    )
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("alias", sa.String(length=256), nullable=False),
        sa.Column("baseline_route_id", sa.Integer(), nullable=False),
        sa.Column("candidate_route_id", sa.Integer(), nullable=False),
        sa.Column(
            "mode",
            sa.Enum(
                "shadow",
                "canary",
                name="rollout_mode",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("sample_rate", sa.Float(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "pending",
                "running",
                "held",
                "killed",
                "promoted",
                name="rollout_state",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("policy", JSON, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("ended_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["baseline_route_id"], ["routes.id"], name=op.f("fk_rollouts_baseline_route_id_routes")
        ),
        sa.ForeignKeyConstraint(
            ["candidate_route_id"],
            ["routes.id"],
            name=op.f("fk_rollouts_candidate_route_id_routes"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollouts")),
        sa.UniqueConstraint("name", name=op.f("uq_rollouts_name")),
    )
    op.create_index(op.f("ix_rollouts_alias_state"), "rollouts", ["alias", "state"], unique=False)
    op.create_table(
        "audit_events",
        sa.Column("id", BIGID, nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=True),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=True),
        sa.Column("details", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_audit_events_rollout_id_rollouts"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(
        op.f("ix_audit_events_created_at"), "audit_events", ["created_at"], unique=False
    )
    op.create_index(
        op.f("ix_audit_events_rollout_id_created_at"),
        "audit_events",
        ["rollout_id", "created_at"],
        unique=False,
    )
    op.create_table(
        "requests",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=True),
        sa.Column("endpoint", sa.String(length=32), nullable=False),
        sa.Column("body", JSON, nullable=True),
        sa.Column("inputs", JSON, nullable=False),
        sa.Column("segment", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=True),
        sa.Column("inflight_baseline", sa.Integer(), nullable=False),
        sa.Column("inflight_candidate", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_requests_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_requests")),
    )
    op.create_index(op.f("ix_requests_created_at"), "requests", ["created_at"], unique=False)
    op.create_table(
        "verdicts",
        sa.Column("id", BIGID, nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column(
            "decision",
            sa.Enum(
                "continue",
                "promote",
                "kill",
                "hold",
                name="decision",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("reason_codes", JSON, nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("estimates", JSON, nullable=False),
        sa.Column("n_pairs", sa.Integer(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_verdicts_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verdicts")),
    )
    op.create_index(
        op.f("ix_verdicts_rollout_id_created_at"),
        "verdicts",
        ["rollout_id", "created_at"],
        unique=False,
    )
    op.create_table(
        "pairs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.Uuid(), nullable=True),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "open",
                "complete",
                "dropped",
                name="pair_state",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("is_control", sa.Boolean(), nullable=False),
        sa.Column("segment", sa.String(length=64), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("deadline", TIMESTAMP, nullable=False),
        sa.Column("completed_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["requests.id"],
            name=op.f("fk_pairs_request_id_requests"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_pairs_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pairs")),
        sa.UniqueConstraint("request_id", name=op.f("uq_pairs_request_id")),
    )
    op.create_index(
        op.f("ix_pairs_rollout_id_stage_created_at"),
        "pairs",
        ["rollout_id", "stage", "created_at"],
        unique=False,
    )
    op.create_index(op.f("ix_pairs_state_deadline"), "pairs", ["state", "deadline"], unique=False)
    op.create_table(
        "generations",
        sa.Column("id", BIGID, nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=True),
        sa.Column("pair_id", sa.Uuid(), nullable=True),
        sa.Column("request_id", sa.Uuid(), nullable=True),
        sa.Column(
            "cohort",
            sa.Enum(
                "baseline",
                "candidate",
                "control",
                name="cohort",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("route_id", sa.Integer(), nullable=True),
        sa.Column("route_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("segment", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("temperature", sa.Float(), nullable=True),
        sa.Column("top_p", sa.Float(), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("tpot_s", sa.Float(), nullable=True),
        sa.Column("e2e_s", sa.Float(), nullable=True),
        sa.Column("queue_s", sa.Float(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("finish_reason", sa.String(length=32), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "ok",
                "error",
                "timeout",
                "fallback",
                "dropped",
                name="generation_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("spec_drafts", sa.Integer(), nullable=True),
        sa.Column("spec_draft_tokens", sa.Integer(), nullable=True),
        sa.Column("spec_accepted_tokens", sa.Integer(), nullable=True),
        sa.Column("prompt", sa.Text(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("output_extra", JSON, nullable=True),
        sa.Column("trace_id", sa.String(length=32), nullable=True),
        sa.Column("span_id", sa.String(length=16), nullable=True),
        sa.Column("response_id", sa.String(length=128), nullable=True),
        sa.Column("started_at", TIMESTAMP, nullable=False),
        sa.Column("content_purged_at", TIMESTAMP, nullable=True),
        sa.ForeignKeyConstraint(
            ["pair_id"], ["pairs.id"], name=op.f("fk_generations_pair_id_pairs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["rollout_id"],
            ["rollouts.id"],
            name=op.f("fk_generations_rollout_id_rollouts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["route_id"],
            ["routes.id"],
            name=op.f("fk_generations_route_id_routes"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_generations")),
        sa.UniqueConstraint("trace_id", "span_id", name=op.f("uq_generations_trace_id_span_id")),
    )
    op.create_index(op.f("ix_generations_pair_id"), "generations", ["pair_id"], unique=False)
    op.create_index(
        op.f("ix_generations_response_id"), "generations", ["response_id"], unique=False
    )
    op.create_index(
        op.f("ix_generations_rollout_id_cohort_started_at"),
        "generations",
        ["rollout_id", "cohort", "started_at"],
        unique=False,
    )
    op.create_index(
        op.f("ix_generations_rollout_id_segment_started_at"),
        "generations",
        ["rollout_id", "segment", "started_at"],
        unique=False,
    )
    op.create_table(
        "evaluations",
        sa.Column("id", BIGID, nullable=False),
        sa.Column("generation_id", BIGID, nullable=False),
        sa.Column("evaluator", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("details", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
            name=op.f("fk_evaluations_generation_id_generations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluations")),
        sa.UniqueConstraint(
            "generation_id",
            "evaluator",
            "version",
            name=op.f("uq_evaluations_generation_id_evaluator_version"),
        ),
    )
    op.create_table(
        "feedback",
        sa.Column("id", BIGID, nullable=False),
        sa.Column("generation_id", BIGID, nullable=True),
        sa.Column("pair_id", sa.Uuid(), nullable=True),
        sa.Column("response_id", sa.String(length=128), nullable=True),
        sa.Column("thumbs", sa.Integer(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("escalated", sa.Boolean(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
            name=op.f("fk_feedback_generation_id_generations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feedback")),
    )
    op.create_index(op.f("ix_feedback_generation_id"), "feedback", ["generation_id"], unique=False)
    op.create_index(op.f("ix_feedback_pair_id"), "feedback", ["pair_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_feedback_pair_id"), table_name="feedback")
    op.drop_index(op.f("ix_feedback_generation_id"), table_name="feedback")
    op.drop_table("feedback")
    op.drop_table("evaluations")
    op.drop_index(op.f("ix_generations_rollout_id_segment_started_at"), table_name="generations")
    op.drop_index(op.f("ix_generations_rollout_id_cohort_started_at"), table_name="generations")
    op.drop_index(op.f("ix_generations_response_id"), table_name="generations")
    op.drop_index(op.f("ix_generations_pair_id"), table_name="generations")
    op.drop_table("generations")
    op.drop_index(op.f("ix_pairs_state_deadline"), table_name="pairs")
    op.drop_index(op.f("ix_pairs_rollout_id_stage_created_at"), table_name="pairs")
    op.drop_table("pairs")
    op.drop_index(op.f("ix_verdicts_rollout_id_created_at"), table_name="verdicts")
    op.drop_table("verdicts")
    op.drop_index(op.f("ix_requests_created_at"), table_name="requests")
    op.drop_table("requests")
    op.drop_index(op.f("ix_audit_events_rollout_id_created_at"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_created_at"), table_name="audit_events")
    op.drop_table("audit_events")
    op.drop_index(op.f("ix_rollouts_alias_state"), table_name="rollouts")
    op.drop_table("rollouts")
    op.drop_index(op.f("ix_engine_samples_route_id_metric_scraped_at"), table_name="engine_samples")
    op.drop_table("engine_samples")
    op.drop_index(op.f("ix_spans_start_time"), table_name="spans")
    op.drop_table("spans")
    op.drop_table("routes")
    op.drop_table("reports")
    op.drop_index(op.f("ix_idempotency_keys_created_at"), table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_table("api_keys")
