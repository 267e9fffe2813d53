"""A request's episode: read once from the first source it carries, in the documented order."""

from __future__ import annotations

import pytest

from gate.db.enums import EpisodeSource
from gate.errors import BadRequest
from gate.request.episodes import MAX_CHARS, Episode, episode_of

SYSTEM = {"role": "system", "content": "You are terse."}
FIRST = {"role": "user", "content": "Plan a trip to Lyon."}


def turns(opening: dict, n: int) -> list[list[dict]]:
    """The message lists of n turns of one conversation opened by `opening`."""
    messages = [SYSTEM, opening]
    found = [list(messages)]
    for k in range(1, n):
        messages += [
            {"role": "assistant", "content": f"answer {k}"},
            {"role": "user", "content": f"more {k}"},
        ]
        found.append(list(messages))
    return found


def test_every_turn_of_a_conversation_shares_its_prefix_episode():
    opening, *later = [episode_of({}, {"messages": m}) for m in turns(FIRST, 6)]
    episodes = set(later)
    assert len(episodes) == 1
    (episode,) = episodes
    assert episode.source is EpisodeSource.PREFIX and episode.id.startswith("prefix:")
    # The opening turn is assigned with the turns that follow it (one cohort) ...
    assert opening.key == episode.id
    other = episode_of({}, {"messages": turns({"role": "user", "content": "Plan Rome."}, 2)[1]})
    assert other.id != episode.id


def test_identical_one_shot_requests_are_each_their_own_episode():
    # ... but is not an episode: a fixed prompt sent many times is many independent pairs,
    # not one conversation (the gate would otherwise see one episode and never decide).
    opening = episode_of({}, {"messages": [SYSTEM, FIRST]})
    assert opening.id is None and opening.source is None
    assert opening.key is not None and opening.key.startswith("prefix:")


def test_a_completion_without_a_declared_episode_is_its_own():
    assert episode_of({}, {"prompt": "Once upon a time"}) == Episode()
    assert episode_of({}, {"messages": [SYSTEM]}) == Episode()


def test_sources_are_read_in_order_header_baggage_metadata_user_prefix():
    body = {"messages": [FIRST], "metadata": {"episode_id": "m-1"}, "user": "ada"}
    baggage = "k=v, session.id=s-1 ,gen_ai.conversation.id=conv%201;prop=x"
    headers = {"x-specgate-episode": "h-1", "baggage": baggage}
    assert episode_of(headers, body) == Episode("h-1", EpisodeSource.HEADER)
    assert episode_of({"baggage": baggage}, body) == Episode("conv 1", EpisodeSource.BAGGAGE)
    assert episode_of({"baggage": "session.id=s-1"}, body).id == "s-1"
    assert episode_of({}, body) == Episode("m-1", EpisodeSource.METADATA)
    conversation = {**body, "metadata": {"conversation_id": "c-9"}}
    assert episode_of({}, conversation).id == "c-9"
    by_user = episode_of({}, {**body, "metadata": {}})
    assert by_user.source is EpisodeSource.USER and by_user.id.startswith("user:")
    assert "ada" not in by_user.id  # a person's name is stored as a hash
    continued = [FIRST, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "?"}]
    assert episode_of({}, {"messages": continued}).source is EpisodeSource.PREFIX


def test_a_bad_header_is_refused():
    for bad in ("x" * (MAX_CHARS + 1), "tab\there"):
        with pytest.raises(BadRequest, match="X-Specgate-Episode"):
            episode_of({"x-specgate-episode": bad}, {"messages": [FIRST]})


def test_a_bad_borrowed_value_is_ignored_with_its_reason():
    body = {"messages": turns(FIRST, 2)[1], "metadata": {"episode_id": 7}, "user": "x" * 300}
    episode = episode_of({"baggage": "session.id=%0A"}, body)
    assert episode.source is EpisodeSource.PREFIX
    assert episode.ignored == (
        "baggage: not printable",
        "metadata: not a string",
        f"user: not 1 to {MAX_CHARS} characters",
    )
