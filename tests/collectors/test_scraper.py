"""Engine metrics scraping: vLLM exposition (with `_created`, two engines, a reset), others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from collectors import scraper
from collectors.scrape_job import scrape_routes
from gate.db.models import EngineSample, Route
from tests.collectors.factory import make_rollout


def vllm_text(engines: dict[str, tuple[float, float, float, list[float]]], ttft=(4.0, 0.8)) -> str:
    """vLLM 0.33-style exposition: `_total` counters, `_created` gauges, one series per engine."""
    lines = []
    names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    for index, name in enumerate(names):
        lines += [
            f"# HELP vllm:spec_decode_{name}_total Spec decode {name}.",
            f"# TYPE vllm:spec_decode_{name}_total counter",
        ]
        for engine, values in engines.items():
            labels = f'engine="{engine}",model_name="llama"'
            lines.append(f"vllm:spec_decode_{name}_total{{{labels}}} {values[index]}")
        lines.append(f"# TYPE vllm:spec_decode_{name}_created gauge")
        for engine in engines:
            lines.append(
                f'vllm:spec_decode_{name}_created{{engine="{engine}",model_name="llama"}} 1.76e9'
            )
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for engine, values in engines.items():
        for position, accepted in enumerate(values[3]):
            labels = f'engine="{engine}",model_name="llama",position="{position}"'
            lines.append(
                f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels}}} {accepted}"
            )
    count, total = ttft
    lines += [
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="llama"} 3.0',
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama"} '
        f"{count}",
        f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="llama"}} {count}',
        f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="llama"}} {total}',
        "# TYPE vllm:time_to_first_token_seconds_created gauge",
        'vllm:time_to_first_token_seconds_created{engine="0",model_name="llama"} 1.76e9',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.2',
        'vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.4',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="llama"} 3.0',
        'vllm:num_requests_running{engine="1",model_name="llama"} 2.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="llama"} 1.0',
        "# TYPE vllm:request_success_total counter",
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 7.0',
        'vllm:request_success_total{engine="1",finished_reason="stop",model_name="llama"} 5.0',
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="llama"} 1.0',
        "# TYPE vllm:request_success_created gauge",
        'vllm:request_success_created{engine="0",finished_reason="stop",model_name="llama"} 1.76e9',
    ]
    return "\n".join(lines) + "\n"


FIRST = vllm_text({"0": (100, 400, 150, [60, 50, 40, 0]), "1": (50, 200, 50, [30, 15, 5, 0])})
SECOND = vllm_text(
    {"0": (200, 800, 330, [120, 110, 90, 10]), "1": (90, 360, 100, [55, 30, 15, 0])},
    ttft=(10.0, 2.0),
)


def test_parse_sums_engines_and_ignores_created_samples():
    snapshot = scraper.parse(FIRST)
    assert snapshot.counters[("spec_drafts", ())] == 150
    assert snapshot.counters[("spec_draft_tokens", ())] == 600
    assert snapshot.counters[("spec_accepted_tokens", ())] == 200
    assert snapshot.counters[("spec_accepted_tokens_per_pos", (("position", "0"),))] == 90
    assert snapshot.counters[("requests_finished", (("finished_reason", "stop"),))] == 12
    assert snapshot.counters[("ttft_seconds_count", ())] == 4.0
    assert snapshot.gauges == {
        ("kv_cache_usage", ()): pytest.approx(0.3),
        ("requests_running", ()): 5.0,
        ("requests_waiting", ()): 1.0,
    }
    assert not any("created" in name for name, _ in snapshot.counters | snapshot.gauges)


def test_window_values_and_derived_acceptance():
    values = scraper.window_samples(scraper.parse(FIRST), scraper.parse(SECOND))
    # deltas: drafts 140, draft tokens 560, accepted 230
    assert values[("spec_drafts_window", ())] == 140
    assert values[("spec_acceptance_rate_window", ())] == pytest.approx(230 / 560)
    assert values[("spec_mean_acceptance_length_window", ())] == pytest.approx(1 + 230 / 140)
    per_position = {
        dict(labels)["position"]: value
        for (name, labels), value in values.items()
        if name == "spec_acceptance_rate_per_pos_window"
    }
    assert per_position == pytest.approx(
        {"0": 85 / 140, "1": 75 / 140, "2": 60 / 140, "3": 10 / 140}
    )
    assert values[("ttft_seconds_mean_window", ())] == pytest.approx(1.2 / 6)


def test_a_counter_that_goes_down_restarted():
    restarted = vllm_text({"0": (30, 120, 60, [20, 15, 10, 0])})
    values = scraper.window_samples(scraper.parse(SECOND), scraper.parse(restarted))
    assert values[("spec_drafts_window", ())] == 30  # the new value is the window's increase
    assert values[("spec_acceptance_rate_window", ())] == pytest.approx(60 / 120)
    # A histogram's `_count` and `_sum` begin again together (here both went down).
    assert values[("ttft_seconds_mean_window", ())] == pytest.approx(0.8 / 4)


def spec_window(first: str, second: str) -> tuple[float, float]:
    values = scraper.window_samples(scraper.parse(first), scraper.parse(second))
    return values[("spec_draft_tokens_window", ())], values[("spec_acceptance_rate_window", ())]


def test_one_engine_restarting_among_several_is_a_reset_of_that_engine_only():
    before = vllm_text({"0": (100, 400, 150, [90]), "1": (50, 200, 50, [40])})
    # Engine 1 restarted (its counters began again); engine 0 went on.
    after = vllm_text({"0": (200, 800, 330, [170]), "1": (10, 40, 8, [8])})
    tokens, rate = spec_window(before, after)
    assert tokens == 400 + 40 and rate == pytest.approx((180 + 8) / (400 + 40))


def test_a_reset_hidden_by_another_engines_growth_is_still_a_reset():
    before = vllm_text({"0": (100, 400, 150, [90]), "1": (500, 2000, 1000, [600])})
    # Every sum over engines grew, although engine 1 restarted.
    after = vllm_text({"0": (900, 3600, 1650, [900]), "1": (20, 80, 10, [10])})
    tokens, rate = spec_window(before, after)
    assert tokens == 3200 + 80 and rate == pytest.approx((1500 + 10) / (3200 + 80))


def test_one_counter_going_down_restarts_every_series_of_its_engine():
    before = vllm_text({"0": (100, 400, 150, [90])})
    # Engine 0 restarted: its drafts went down, its draft and accepted tokens went up.
    after = vllm_text({"0": (30, 420, 160, [100])})
    tokens, rate = spec_window(before, after)
    assert tokens == 420 and rate == pytest.approx(160 / 420)


def test_a_new_created_time_is_a_restart_and_a_first_seen_series_is_not():
    before = vllm_text({"0": (100, 400, 150, [90])})
    after = vllm_text({"0": (130, 520, 200, [110])})
    assert spec_window(before, after) == (120, pytest.approx(50 / 120))
    # A finish reason seen for the first time brings its own `_created`: no restart.
    first_seen = (
        'vllm:request_success_created{engine="0",finished_reason="abort",model_name="llama"}'
    )
    assert spec_window(before, after + f"{first_seen} 1.9e9\n") == (120, pytest.approx(50 / 120))
    restarted = after.replace(
        '_created{engine="0",model_name="llama"} 1.76e9',
        '_created{engine="0",model_name="llama"} 1.77e9',
    )
    assert spec_window(before, restarted) == (520, pytest.approx(200 / 520))


def test_sglang_and_tensorrt_llm_map_to_the_same_names():
    sglang = scraper.parse(
        '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 2.5\n'
        '# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name="m"} 0.6\n'
    )
    assert sglang.gauges == {
        ("spec_mean_acceptance_length", ()): 2.5,
        ("spec_acceptance_rate", ()): 0.6,
    }
    trtllm = scraper.parse(
        "trtllm_spec_decode_num_draft_tokens_total 400\n"
        "trtllm_spec_decode_num_accepted_tokens_total 100\n"
        "trtllm_spec_decode_acceptance_length 1.8\n"
    )
    assert trtllm.counters == {("spec_draft_tokens", ()): 400, ("spec_accepted_tokens", ()): 100}
    assert trtllm.gauges == {("spec_mean_acceptance_length", ()): 1.8}


@pytest.mark.postgres
def test_scrape_routes_stores_samples_and_windows(pg_committing: sessionmaker[Session]):
    with pg_committing() as session, session.begin():
        ids = make_rollout(session)
        session.get(Route, ids.candidate_route).metrics_url = "http://spec:8000/metrics"
        session.get(Route, ids.baseline_route).metrics_url = "http://down:8000/metrics"
    pages = iter([FIRST, SECOND])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down":
            return httpx.Response(503)
        return httpx.Response(200, text=next(pages))

    start = datetime(2026, 11, 20, tzinfo=UTC)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        first = scrape_routes(pg_committing, client, now=start)
        second = scrape_routes(pg_committing, client, now=start + timedelta(seconds=15))
    assert set(first) == set(second) == {"llama-ngram-spec"}
    with pg_committing() as session:
        latest = {
            (row.metric, tuple(row.labels.items())): row.value
            for row in session.scalars(
                select(EngineSample).where(EngineSample.scraped_at == start + timedelta(seconds=15))
            )
        }
    assert latest[("spec_drafts", ())] == 290
    assert latest[("spec_acceptance_rate_window", ())] == pytest.approx(230 / 560)
    assert latest[("requests_finished", (("finished_reason", "stop"),))] == 12
    one_engine = (("engine", "1"), ("model_name", "llama"))
    assert latest[("spec_drafts_series", one_engine)] == 90


@pytest.mark.postgres
def test_stored_windows_take_a_hidden_engine_reset_as_a_reset(pg_committing):
    with pg_committing() as session, session.begin():
        ids = make_rollout(session)
        session.get(Route, ids.candidate_route).metrics_url = "http://spec:8000/metrics"
    pages = iter(
        [
            vllm_text({"0": (100, 400, 150, [90]), "1": (500, 2000, 1000, [600])}),
            vllm_text({"0": (900, 3600, 1650, [900]), "1": (20, 80, 10, [10])}),
        ]
    )
    handler = lambda request: httpx.Response(200, text=next(pages))  # noqa: E731
    start = datetime(2026, 11, 20, tzinfo=UTC)
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        for turn in range(2):
            scrape_routes(pg_committing, client, now=start + timedelta(seconds=15 * turn))
    with pg_committing() as session:
        rate = session.scalar(
            select(EngineSample.value).where(EngineSample.metric == "spec_acceptance_rate_window")
        )
    assert rate == pytest.approx((1500 + 10) / (3200 + 80))


def test_a_route_behind_auth_is_scraped_with_its_credential(
    pg_committing: sessionmaker[Session], monkeypatch
):
    monkeypatch.setenv("SPECGATE_ROUTE_SPEC_KEY", "s3cret")
    with pg_committing() as session, session.begin():
        ids = make_rollout(session)
        route = session.get(Route, ids.candidate_route)
        route.metrics_url = "http://spec:8000/metrics"
        route.auth = {"header": "Authorization", "source": "env:SPECGATE_ROUTE_SPEC_KEY"}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != "Bearer s3cret":
            return httpx.Response(401)
        return httpx.Response(200, text=FIRST)

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        written = scrape_routes(pg_committing, client)
    assert written["llama-ngram-spec"] > 0
