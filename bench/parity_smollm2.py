"""A small real-engine look at the biased verifier: SmolLM2 on the transformers backend.

Generates `--answers` answers per variant (plain, ngram + exact, ngram + biased-argmax) to a
copy-heavy prompt at temperature 0.8, unseeded, with logprobs, and prints each variant's mean
token log-probability, draft acceptance and how many answers ended naturally. A sanity
check of the effect's direction on a real model, not the ≥ 300-pair gate run of issue 25.

Usage: python bench/parity_smollm2.py [--answers 12] [--max-tokens 48]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gate.engines.base import GenRequest
from gate.engines.hf import TransformersBackend
from gate.engines.model import find_gguf
from gate.engines.spec import NgramConfig
from gate.parity import answer_stats

PROMPT = (
    "Proofread this text and output only the corrected text.\n\nThe meeting have been moved "
    "to Thursday afternoon becuase the conference room is being painted. Pleese bring your "
    "laptop and the quartely figures, and remind the team that the deadline for the report "
    "is still Friday."
)
SPEC = NgramConfig(num_speculative_tokens=8, prompt_lookup_min=2, prompt_lookup_max=3)


def main() -> None:
    """Generate the answers and print one line per variant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    plain = TransformersBackend(find_gguf(), spec=None)
    variants = {
        "plain": plain,
        "exact": plain.with_spec(SPEC),
        "biased": plain.with_spec(SPEC, "biased-argmax"),
    }
    request = GenRequest(
        chat=True,
        messages=[{"role": "user", "content": PROMPT}],
        prompt="",
        max_tokens=args.max_tokens,
        temperature=0.8,
        logprobs=True,
    )
    for name, backend in variants.items():
        started = time.perf_counter()
        means, natural, drafted, accepted = [], 0, 0, 0
        for _ in range(args.answers):
            outcome = backend.generate(request, lambda _delta: True)
            entries = outcome.logprobs or []
            stats = answer_stats([e["token"] for e in entries], [e["logprob"] for e in entries])
            means.append(stats.mean_logprob or 0.0)
            natural += outcome.finish_reason == "stop"
            if outcome.spec is not None:
                drafted += outcome.spec.num_draft_tokens
                accepted += outcome.spec.num_accepted_draft_tokens
        rate = accepted / drafted if drafted else 0.0
        print(
            f"{name:<7} mean logprob {np.mean(means):.3f} (sd {np.std(means, ddof=1):.3f}), "
            f"acceptance {rate:.2f}, natural ends {natural}/{args.answers}, "
            f"{time.perf_counter() - started:.0f} s"
        )


if __name__ == "__main__":
    main()
