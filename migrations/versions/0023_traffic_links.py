"""Traffic links: specgate drives an HTTPRoute or a pair of LLMInferenceServices itself.

`controller_links.controller` gains `k8s-traffic`; `target` names the objects the link
drives (kind, namespace, names, gateway) and `written` keeps what specgate last wrote to
them (the fields it owns, the rollout state and stage it wrote for, whether the status
conditions confirmed it), so that an edit by anyone else is seen and never overwritten.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 20:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    """Add the columns and admit the new kind."""
    with op.batch_alter_table("controller_links") as batch:
        batch.add_column(sa.Column("target", JSON, nullable=True))
        batch.add_column(sa.Column("written", JSON, nullable=True))
        batch.drop_constraint("controller_kind", type_="check")
        batch.create_check_constraint(
            "controller_kind", "controller IN ('argo-rollouts', 'flagger', 'k8s-traffic')"
        )


def downgrade() -> None:
    """Drop traffic links and the columns."""
    op.execute("DELETE FROM controller_links WHERE controller = 'k8s-traffic'")
    with op.batch_alter_table("controller_links") as batch:
        batch.drop_constraint("controller_kind", type_="check")
        batch.create_check_constraint(
            "controller_kind", "controller IN ('argo-rollouts', 'flagger')"
        )
        batch.drop_column("written")
        batch.drop_column("target")
