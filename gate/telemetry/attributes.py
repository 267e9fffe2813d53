"""Span names and attribute keys shared by the gateway (writer) and collectors (reader).

Two kinds of span leave the gateway:

* one ``specgate.pair`` span (kind INTERNAL) per sampled request: the pair and request
  facts (ids, rollout, stage, segment, episode, control flag, in-flight counts, deadline, the
  bounded request body and declared evaluator inputs as JSON strings);
* one span per route call (kind CLIENT) named ``"{operation} {model}"``, with the OTel
  GenAI attributes and the ``specgate.*`` attributes below. Unsampled traffic gets route
  spans without a pair id.

Durations are seconds (floats). JSON-valued attributes are JSON strings, because OTel
attribute values are scalars or homogeneous arrays.
"""

from __future__ import annotations

PAIR_SPAN_NAME = "specgate.pair"

# --- OpenTelemetry GenAI semantic conventions (current names) -------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"  # "chat" | "text_completion"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"  # string array
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

# --- vLLM's own llm_request span (old GenAI names, as vLLM emits them) ------------------
VLLM_SPAN_NAME = "llm_request"
VLLM_TTFT = "gen_ai.latency.time_to_first_token"
VLLM_E2E = "gen_ai.latency.e2e"
VLLM_QUEUE = "gen_ai.latency.time_in_queue"
VLLM_PREFILL = "gen_ai.latency.time_in_model_prefill"
VLLM_DECODE = "gen_ai.latency.time_in_model_decode"
VLLM_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
VLLM_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
VLLM_REQUEST_ID = "gen_ai.request.id"

# --- specgate attributes on both span kinds -------------------------------------------
ROLLOUT_ID = "specgate.rollout.id"  # int
ROLLOUT_STAGE = "specgate.rollout.stage"  # int
MODE = "specgate.mode"  # "shadow" | "canary" | "none"
PAIR_ID = "specgate.pair.id"  # UUID string
REQUEST_ID = "specgate.request.id"  # UUID string
SEGMENT = "specgate.segment"
TENANT = "specgate.tenant"
# The arm of a rollout with several candidates whose route the pair's candidate call
# went to (`rollout_arms.name`); absent: the rollout has one candidate, or a control pair.
ARM = "specgate.arm"
# A promoted rollout's request routed by load (`gate.gateway.by_load`): why it went where
# it went ("below_crossover" | "above_crossover" | "crossover_stale" | "crossover_missing"),
# the segment's crossover and the candidate's running requests it was compared with.
ROUTED_BY_LOAD = "specgate.routed_by_load"
CROSSOVER = "specgate.crossover"  # int, running requests
CROSSOVER_RUNNING = "specgate.crossover.running"  # float

# --- pair span only --------------------------------------------------------------------
PAIR_IS_CONTROL = "specgate.pair.is_control"  # bool
PAIR_DEADLINE_S = "specgate.pair.deadline_s"  # seconds after the pair span's start
# The pair span's start (Unix ns), on its call spans too: a stub written from a call's span
# takes the pair's time, so it and the pair span agree on `pairs.created_at`.
PAIR_STARTED_NS = "specgate.pair.started_ns"  # int
INFLIGHT_BASELINE = "specgate.inflight.baseline"  # int, at the pair's start
INFLIGHT_CANDIDATE = "specgate.inflight.candidate"  # int
# str: the gateway process that counted them; summing over replicas gives a route's load
GATEWAY_REPLICA = "specgate.gateway.replica"
REQUEST_ENDPOINT = "specgate.request.endpoint"  # "chat" | "completions"
REQUEST_BODY = "specgate.request.body"  # JSON string, bounded, absent if not captured
REQUEST_INPUTS = "specgate.request.inputs"  # JSON string: context, reference, tests, schema
# Parts of the request cut at the evaluation-input limit: a list of "body", "inputs".
REQUEST_TRUNCATED = "specgate.request.truncated"
# The request's episode (`gate.request.episodes`): its id (absent: its own episode), the
# source it came from ("header" | "baggage" | "metadata" | "user" | "prefix"), and the
# borrowed values ignored on the way, as "source: reason" strings.
EPISODE = "specgate.episode"
EPISODE_SOURCE = "specgate.episode.source"
EPISODE_IGNORED = "specgate.episode.ignored"

# --- route-call spans only -------------------------------------------------------------
COHORT = "specgate.cohort"  # "baseline" | "candidate" | "control"
ROUTE_ID = "specgate.route.id"  # int
ROUTE_NAME = "specgate.route.name"
ROUTE_FINGERPRINT = "specgate.route.fingerprint"  # hash of model + speculative config
STATUS = "specgate.status"  # ok | error | timeout | fallback | dropped | cancelled
ERROR = "specgate.error"  # short error text
STREAM = "specgate.stream"  # bool
TTFT_S = "specgate.ttft_s"
TPOT_S = "specgate.tpot_s"
E2E_S = "specgate.e2e_s"
QUEUE_S = "specgate.queue_s"  # from the engine's per-request metrics, when given
# Seconds a mirror or control call waited in the gateway's own queue before it started
# (not part of the route's time: e2e and the deadline count from the start).
MIRROR_QUEUE_S = "specgate.mirror.queue_s"
ITL_MAX_S = "specgate.itl_max_s"  # largest gap between content chunks
# TTFT and TPOT as the engine reported them (vLLM `--enable-per-request-metrics`), absent
# when it did not. TTFT_S / TPOT_S above are only ever the gateway's own measurements (none
# for a non-streamed call): the two sources are never mixed.
ENGINE_TTFT_S = "specgate.engine.ttft_s"
ENGINE_TPOT_S = "specgate.engine.tpot_s"
SPEC_DRAFTS = "specgate.spec.drafts"  # int: speculative steps
SPEC_DRAFT_TOKENS = "specgate.spec.draft_tokens"  # int
SPEC_ACCEPTED_TOKENS = "specgate.spec.accepted_tokens"  # int
# Token log-probabilities the answer carried (sampled parity): how many, and their sum.
LOGPROB_TOKENS = "specgate.logprobs.tokens"  # int
LOGPROB_SUM = "specgate.logprobs.sum"  # float
# Per-token exactness (`gate.exactness`): the call's sufficient statistics, a compact JSON
# string exactly `TokenFit.as_dict()`: {"n": tested tokens, "cut": tokens the request's
# settings make impossible, "skipped": positions not tested, "bins": 20 floats summing to
# n, "off": tested tokens not their position's most likely, "off_p": the sum of their
# chances not to be, "off_p2": the sum of those chances' squares}. Computed by the
# gateway from choice 0's `top_logprobs` (n = 1 answers at temperature > 0, where the
# rollout's policy enables `guardrails.exactness`),
# after the call ended and off its event loop; absent when the answer carried no
# alternatives. The collector stores it in `generations.exactness`.
EXACTNESS = "specgate.exactness"  # JSON string
# The call, carrying logprobs the gateway added, was rejected (400/422) and made again
# without them: the route is remembered as rejecting them if that call was answered.
LOGPROBS_REJECTED = "specgate.logprobs.rejected"  # bool
FALLBACK = "specgate.fallback"  # bool: canary call that fell back to the baseline
PROMPT = "specgate.prompt"  # captured prompt text (sampled pairs only, bounded)
OUTPUT = "specgate.output"  # captured output text (sampled pairs only, bounded)
OUTPUT_TRUNCATED = "specgate.output.truncated"  # bool: output cut at the evaluation limit
OUTPUT_EXTRA = "specgate.output.extra"  # JSON string: tool calls and other structure
