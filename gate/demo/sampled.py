"""The sampled-parity demo's workload and policy: copy-heavy prompts at temperature 0.8.

Short sentences to proofread: the answer mostly copies the prompt, so n-gram drafts are
accepted often enough for a wrong verifier to act. Each request is sampled (temperature
0.8), unseeded, so the two sides of a pair are independent draws, and not streamed, so the
gateway asks both routes for the tokens' log-probabilities alike (`gate.gateway.logprobs`).
`max_tokens` leaves room for a natural end: a side cut by the limit is censored and its pair
leaves the test (`gate.parity.eligibility`).
"""

from __future__ import annotations

from typing import Any

from gate.engines.workload import CHAT_PATH, WorkloadItem
from gate.request.fields import BODY_FIELD

SEGMENT = "proofread"
# The candidate drafts from a one-token match (n-gram sizes 1 to 3): drafts start with the
# answer's first copied word, so a wrong verifier acts from there. With matches of 3 tokens
# only, SmolLM2 at 0.8 has often left the text before the first draft, and the bias shows
# less (BENCHMARKS.md).
PROMPT_LOOKUP_MIN = 1
TEMPERATURE = 0.8
MAX_TOKENS = 64
INSTRUCTION = "Proofread this sentence and output only the corrected sentence.\n\n"
TEXTS = (
    "The meeting have been moved to Thursday becuase the room is being painted.",
    "Our libary will be close on Monday for the public holiday.",
    "The new bicycle lane have made my commute much more safer.",
    "Pleese bring your laptop and the quartely figures to the meeting.",
    "The software update fix several bugs that caused the aplication to crash.",
    "We traveled by train from Lisbon to Porto and the views was beautiful.",
    "The tomatoes needs water every evening, but the cactus only once a week.",
    "Books that are due on Monday can be returned on Tuesday without a late fee.",
    "She don't know wether the shop is open on sundays.",
    "The children was playing in the garden untill it started to rain.",
    "Their going to announce the results of the competition tomorow morning.",
    "The report was wrote by three students from the university of Leeds.",
)


def sampled_workload(requests: int) -> list[WorkloadItem]:
    """Return `requests` copy-heavy sampled requests, cycling through the texts."""
    return [_item(n) for n in range(requests)]


def _item(n: int) -> WorkloadItem:
    text = TEXTS[n % len(TEXTS)]
    body: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": INSTRUCTION + text}],
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "stream": False,
        # One user per request, as from many conversations: the gateway's control slice
        # hashes the user, so it takes ~5 % of the requests rather than whole texts.
        "user": f"parity-demo-{n + 1}",
        BODY_FIELD: {"segment": SEGMENT},
    }
    return WorkloadItem(f"{SEGMENT}-{n + 1:04d}", SEGMENT, CHAT_PATH, body)


def parity_policy(warmup_pairs: int) -> dict[str, object]:
    """The demo policy with sampled-output parity on: one segment, a stated warm-up.

    The warm-up's eligible pairs fix the scale of d (at least `min_scale_pairs` of them,
    `gate.stats.parity_cells`), so it must hold enough naturally ended pairs.
    """
    return {
        "segments": [SEGMENT],
        "stages": [100],
        "warmup_pairs": warmup_pairs,
        "min_pairs": warmup_pairs + 40,
        "min_duration_s": 0,
        "guardrails": {"output_parity": {"enabled": True}},
    }
