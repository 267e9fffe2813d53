"""Stamped pairs' sampled-output parity differences, computed again under today's rules.

The fold reads each pair's d from `pairs.parity`, written when the pair is stamped. A pair
stamped before 0016 had none, so the refold that FOLD_VERSION starts would leave it out
of the parity cells and of the warm-up's scale, while a replay of the export keeps it;
one stamped since lacks the text statistics where both sides had complete
log-probabilities, and the mark of partial ones. Every stamped pair with a sampled side
is computed again (NULL stays right for the others).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-08 10:00:00.000000
"""

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from gate.db.enums import Cohort
from gate.pairs.export import SIDES, parity_fields
from gate.pairs.parity import differences

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 2000
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_PENDING = (
    "SELECT p.id FROM pairs p WHERE p.evaluated_at IS NOT NULL AND EXISTS (SELECT 1 FROM"
    " generations g WHERE g.pair_id = p.id AND g.temperature IS NOT NULL){after}"
    " ORDER BY p.id LIMIT :n"
)
_SIDES = sa.text(
    "SELECT pair_id, cohort, temperature, top_p, max_tokens, seed, finish_reason,"
    " output_tokens, logprob_tokens, logprob_sum, distinct_2 FROM generations"
    " WHERE pair_id IN :ids"
).bindparams(sa.bindparam("ids", expanding=True))
_PAIRS = sa.table("pairs", sa.column("id"), sa.column("parity", JSON))
_SET = sa.update(_PAIRS).where(_PAIRS.c.id == sa.bindparam("pid")).values(parity=sa.bindparam("d"))


def upgrade() -> None:
    conn, after = op.get_bind(), None
    while ids := conn.scalars(_pending(after), {"after": after, "n": BATCH}).all():
        sides: dict[Any, dict[str, Any]] = defaultdict(dict)
        for g in conn.execute(_SIDES, {"ids": ids}):
            sides[g.pair_id][SIDES[Cohort(g.cohort)]] = parity_fields(g)
        rows = [
            {"pid": pair_id, "d": differences(found.get("baseline"), found.get("candidate"))}
            for pair_id, found in sides.items()
        ]
        conn.execute(_SET, rows)
        after = ids[-1]


def _pending(after: Any) -> sa.TextClause:
    return sa.text(_PENDING.format(after="" if after is None else " AND p.id > :after"))


def downgrade() -> None:
    """Nothing to undo: 0016's downgrade drops the column."""
