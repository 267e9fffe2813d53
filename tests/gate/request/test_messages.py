"""A chat message reads as the same text for segments, the captured prompt and evaluators."""

from __future__ import annotations

import pytest

from evaluators import grounding_score
from gate.request import segments
from gate.request.messages import message_text, prompt_text

MESSAGES = [
    {"role": "user", "content": "plain"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]},
    {"role": "user", "content": [{"type": "text", "text": 7}, {"type": "text", "text": "b"}]},
    {"role": "user", "content": {"structured": True, "a": 1}},
    {"role": "user", "content": None},
]


@pytest.mark.parametrize("message", MESSAGES)
def test_the_prompt_of_one_message_is_that_message_s_text(message):
    assert prompt_text({"messages": [message]}) == message_text(message)


def test_structured_content_reads_as_sorted_json_and_non_text_parts_are_skipped():
    assert message_text(MESSAGES[3]) == '{"a": 1, "structured": true}'
    assert message_text(MESSAGES[2]) == "b"


def test_segments_and_evaluators_import_the_one_definition():
    assert grounding_score.message_text is message_text
    assert segments.prompt_text is prompt_text
