"""The embedded default end to end: traffic through `specgate serve` becomes pairs,
generations and evaluations in the store, with no collector or worker process."""

from __future__ import annotations

import time
from contextlib import ExitStack

import httpx
import openai
from sqlalchemy import func, select

from gate.db import migrate
from gate.db.engine import make_engine, session_factory
from gate.db.enums import Cohort, PairState
from gate.db.models import Evaluation, Generation, Pair, RequestRecord
from gate.engines.sim import SimProfile, create_sim_app
from gate.pairs.export import pair_records
from gate.stats.record_columns import episode_of
from tests import factories
from tests.gate.api.test_processes import specgate_serve
from tests.servers import serving


def test_traffic_becomes_pairs_generations_and_evaluations(tmp_path):
    url = f"sqlite:///{tmp_path}/store.db"
    migrate.upgrade(url)
    sessions = session_factory(make_engine(url))
    with ExitStack() as stack:
        base = stack.enter_context(serving(create_sim_app(SimProfile(tokens=12))))
        cand = stack.enter_context(
            serving(create_sim_app(SimProfile(tokens=12, spec_tokens=4, acceptance=0.6)))
        )
        with sessions() as db, db.begin():
            factories.running_rollout(
                db,
                name="smol",
                base_url=base + "/v1",
                candidate_url=cand + "/v1",
                sample_rate=1.0,
                policy={"stages": [100]},
            )
        gateway = stack.enter_context(
            specgate_serve(
                url,
                SPECGATE_HOME=str(tmp_path),
                embedded=True,
                SPECGATE_CONTROL_RATE="0",
            )
        )
        client = openai.OpenAI(base_url=gateway + "/v1", api_key="x", max_retries=0)
        for i in range(4):
            client.chat.completions.create(
                model="smol",
                temperature=0,
                max_tokens=12,
                messages=[{"role": "user", "content": f"Repeat: request {i}"}],
                extra_body={"specgate": {"reference": "alpha", "tenant": "acme"}},
                metadata={"episode_id": f"conv-{i % 2}"},  # two conversations of two turns
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with sessions() as db:
                evaluated = db.scalar(select(func.count()).select_from(Evaluation))
                complete = db.scalar(select(func.count()).where(Pair.state == PairState.COMPLETE))
            if complete == 4 and evaluated:
                break
            time.sleep(0.2)
        assert httpx.get(gateway + "/healthz").status_code == 200
    with sessions() as db:
        pairs = db.scalars(select(Pair)).all()
        assert len(pairs) == 4 and {p.state for p in pairs} == {PairState.COMPLETE}
        generations = db.scalars(select(Generation)).all()
        assert (
            sorted(g.cohort for g in generations) == [Cohort.BASELINE] * 4 + [Cohort.CANDIDATE] * 4
        )
        assert all(g.pair_id is not None and g.e2e_s and g.e2e_s > 0 for g in generations)
        cand_rows = [g for g in generations if g.cohort is Cohort.CANDIDATE]
        assert all(g.spec_accepted_tokens and g.spec_draft_tokens for g in cand_rows)
        requests = db.scalars(select(RequestRecord)).all()
        assert len(requests) == 4 and requests[0].inputs["tenant"] == "acme"
        names = {e.evaluator for e in db.scalars(select(Evaluation))}
        assert names, "completed pairs were evaluated"
        assert {(r.episode, r.episode_source) for r in requests} == {
            ("conv-0", "metadata"),
            ("conv-1", "metadata"),
        }
        records = list(pair_records(db, rollout_id=pairs[0].rollout_id))
    episodes = [record["episode"] for record in records]
    assert sorted(episodes) == ["conv-0", "conv-0", "conv-1", "conv-1"]
    assert episodes == [episode_of(record) for record in records]  # as replay reads them
