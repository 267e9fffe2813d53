"""Episodes through the real gateway, driven by the `openai` client: every turn of a
conversation is served by one canary cohort, and a shadow conversation is mirrored whole."""

from __future__ import annotations

from collections import Counter

import openai
import pytest

from gate.db.enums import RolloutMode
from gate.telemetry import attributes as A
from tests.gate.gateway.conftest import ALIAS, Stack, gateway_stack
from tests.waits import wait_until

CONVERSATIONS = 16
TURNS = 4


def converse(stack: Stack, number: int, **kw) -> None:
    """Hold one multi-turn conversation, each turn sending the whole history."""
    client = stack.client()
    messages = [{"role": "user", "content": f"Conversation {number}: proofread teh text."}]
    for turn in range(TURNS):
        answer = client.chat.completions.create(model=ALIAS, messages=messages, **kw)
        messages += [
            {"role": "assistant", "content": answer.choices[0].message.content},
            {"role": "user", "content": f"Turn {turn + 1}: and this one?"},
        ]


def served(log) -> Counter[int]:
    """Requests per conversation number that a route received."""
    return Counter(int(b["messages"][0]["content"].split(":")[0].split()[1]) for b in log.bodies)


@pytest.mark.parametrize("declared", ["prefix", "header", "baggage", "metadata", "user"])
def test_every_turn_of_a_canary_conversation_is_served_by_one_cohort(tmp_path, declared):
    with gateway_stack(tmp_path, mode=RolloutMode.CANARY, sample_rate=0.5) as stack:
        for number in range(CONVERSATIONS):
            kw = {
                "prefix": {},
                "header": {"extra_headers": {"X-Specgate-Episode": f"ep-{number}"}},
                "baggage": {"extra_headers": {"baggage": f"gen_ai.conversation.id=ep-{number}"}},
                "metadata": {"metadata": {"episode_id": f"ep-{number}"}},
                "user": {"user": f"user-{number}"},
            }[declared]
            converse(stack, number, **kw)
        baseline, candidate = served(stack.baseline_log), served(stack.candidate_log)
        assert set(baseline) | set(candidate) == set(range(CONVERSATIONS))
        assert not set(baseline) & set(candidate), "a conversation switched cohorts"
        assert all(n == TURNS for n in (baseline + candidate).values())
        assert 0 < len(candidate) < CONVERSATIONS  # both cohorts served some
        sources = {s.attributes.get(A.EPISODE_SOURCE) for s in stack.pair_spans()}
        # A conversation's opening turn is assigned by its prefix but is no episode (None).
        assert sources == ({declared, None} if declared == "prefix" else {declared})
        sent = stack.baseline_log.headers + stack.candidate_log.headers
        assert not any("x-specgate-episode" in h or "baggage" in h for h in sent)


def test_a_shadow_conversation_is_mirrored_whole_or_not_at_all(tmp_path):
    with gateway_stack(tmp_path, sample_rate=0.5) as stack:
        for number in range(CONVERSATIONS):
            converse(stack, number)
        assert wait_until(stack.mirrors_idle)
        mirrored = served(stack.candidate_log)
        assert 0 < len(mirrored) < CONVERSATIONS
        assert set(mirrored.values()) == {TURNS}
        spans = [s for s in stack.pair_spans() if A.EPISODE in s.attributes]
        episodes = Counter(s.attributes[A.EPISODE] for s in spans)
        # Every turn after the opening one names the conversation's prefix episode.
        assert len(episodes) == len(mirrored) and set(episodes.values()) == {TURNS - 1}


def test_a_bad_episode_header_is_a_400(tmp_path):
    with gateway_stack(tmp_path) as stack:
        with pytest.raises(openai.BadRequestError, match="X-Specgate-Episode"):
            stack.client().chat.completions.create(
                model=ALIAS,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"X-Specgate-Episode": "x" * 300},
            )
        assert stack.baseline_log.bodies == []
