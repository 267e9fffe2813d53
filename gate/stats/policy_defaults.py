"""The default gate policy written out: every field at its default, with the reason.

What a policy left empty does, field by field (`docs/gate.md` points here); a test
(`tests/gate/stats/test_policy.py`) keeps this text and the models of `gate.stats.policy`
in step.
"""

DEFAULT_POLICY_YAML = """\
# specgate gate policy. Every value below is the default.
# Harm is candidate minus baseline, positive = worse. Latency thresholds are relative
# changes of the paired ratio (0.10 = 10% slower); rate thresholds are absolute points.
alpha_kill: 0.025       # chance of killing a rollout that harms nothing, over all its
                        # stages (each stage spends an equal share, split below)
alpha_promote: 0.025    # chance of promoting one that misses any promotion criterion
primary:
  metric: tpot          # tpot | e2e: the latency the speculation must improve
  min_gain: 0.05        # promote only once the ratio is proven below 0.95
  kill_slowdown: 0.10   # kill when proven 10% slower (pooled or in any segment)
guardrails:
  ttft_p50:             # TTFT geometric-mean ratio (exp of the mean paired log-ratio;
                        # the name is historical: it is no median)
    enabled: true
    margin: 0.1         # promotion needs TTFT proven less than 10% slower
    kill_at: 0.1        # killed once proven more than 10% slower
  ttft_tail:            # paired exceedance of the baseline's warm-up p99 of TTFT
    enabled: true
    quantile: 0.99
    margin: 0.02        # at most two points more exceedances than the baseline
    kill_at: 0.005      # killed once proven half a point above the baseline
    required: true
  e2e_tail:             # the same for end-to-end latency
    enabled: true
    quantile: 0.99
    margin: 0.02
    kill_at: 0.005
    required: true
  failures:             # route failures (error, timeout, fallback) on either side
    enabled: true
    margin: 0.015
    kill_at: 0.0        # any proven increase kills
    required: true
  cancels:              # canary only: client disconnects / calls served, per cohort
    enabled: true       # (shadow: the client never waits on the mirrored candidate)
    margin: 0.015
    kill_at: 0.0        # any proven increase kills: give-ups can hide a slow candidate
    required: true
  evaluators:           # fail rate of each evaluator (a failed call fails them all)
    default: {enabled: true, margin: 0.03, kill_at: 0.0, required: true}
    overrides: {}       # per evaluator name
    slots: 4            # evaluators budgeted in the kill split (more are counted if seen)
  feedback:             # share of thumbs-down among rated responses (canary only)
    enabled: true
    margin: 0.03
    kill_at: 0.0
    required: false     # binds once feedback exists
  greedy_mismatch:      # greedy pairs' mismatch rate minus the control slice's
    enabled: true
    evaluator: greedy_parity
    margin: 0.03
    kill_at: 0.0
    required: false     # binds once greedy pairs exist
  acceptance:           # per-request draft acceptance (the request is the unit)
    enabled: true
    floor: 0.2          # killed when proven below; promotion needs it proven above
    segment_floors: {}
    collapse_ratio: 0.5 # collapse = acceptance below half its warm-up level
    collapse_horizon: 1000000  # requests per segment the false-alarm budget covers
  loop:                 # repetition loops (issue 40): acceptance length >= 0.9 (k + 1)
    enabled: true       # with distinct-2 below half the baseline answer's (vs the reverse)
    margin: 0.05        # promotion needs the looping share proven below 5 points
    kill_at: 0.02       # killed once proven above 2 points
    required: false     # binds once a pair is readable (drafts, both answers' distinct-2)
  output_parity:        # sampled outputs (temperature > 0): paired mean of d per answer
    enabled: true       # statistic (mean log-prob, length, distinct-2), two-sided; the
    margin_sd: 0.1      # control slice's shift is an alarm, never a kill
    min_scale_pairs: 20 # warm-up pairs with d needed to fix its sd (control first)
  exactness:            # sampled candidate tokens tested one by one against the target's
    enabled: true       # distribution from top_logprobs (probability integral transform)
    margin_tv: 0.003    # killed when per-token total variation beyond this is proven
    promote_tv: 0.01    # promotion: every bin set proven within this (about 50k tokens)
    top_logprobs: 20    # alternatives asked per token (candidate calls, control share)
    control_share: 0.1  # share of sampled pairs whose baseline call is asked (the alarm)
    logprobs_mode: raw  # raw (vLLM default, T=1 values) | processed (sampling distribution)
    lossy: false        # lossy by design: report the test, never kill on it
  load_bands:           # the primary gain per band of the candidate's running requests
    enabled: true       # (promotion only: no kill share; the verdict lists the bands)
    edges: [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]  # band edges, running requests
    hold_untested_load: true  # hold promotion when the gain is proven only at loads
                        # well below what the next stage brings (next share x baseline)
    max_gap: 0.5        # "well below": more than this share of the baseline's load
segments: [code, json, rag, chat, creative]  # declared from request features only
segment_margin_factor: 2.5  # a segment sees ~1/5 of the pairs: ~sqrt(5) wider bounds
stages: [1.0, 5.0, 25.0, 100.0]  # percent of traffic; promote advances one stage
promotion:              # what the promoted rollout routes to the candidate
  route_by_load: false  # true: only below its segment's crossover C (running requests;
                        # the rehearsal's or the live load bands', the more recent proven
                        # one); the mirror slice and the gate keep running
  hysteresis: 1         # off at C, back on below max(1, C - hysteresis): no flapping
  crossover_max_age_s: 604800.0  # an older crossover (or none): all to the baseline
  load_match: 1.0       # promoted so, the gate judges only the mirrored pairs whose two
                        # routes' running requests differ by at most this (and are known)
arms:                   # several candidate configurations in one rollout (pairs name one)
  slots: 4              # arms budgeted: each arm's gate spends alpha / slots
  tie_margin: 0.05      # arms proven within 5% of each other (primary ratio) are tied
  alpha_choice: 0.05    # chance of a strict preference between equal arms, or of
                        # choosing one more than the margin slower than the best
  reallocate: false     # true: at each stage boundary an arm the last verdict proved
                        # behind another live arm gets behind_weight for the next stage
  behind_weight: 0.25   # its weight then (others 1; share = weight / sum); floor 0.05
min_pairs: 1000         # complete pairs after warm-up before any promotion
min_duration_s: 1800.0  # and 30 minutes, to cover load swings
warmup_pairs: 200       # excluded from tests; fixes tail thresholds and acceptance level
max_duration_s: 259200.0  # hold after 72 hours without a decision
max_dropped_share: 0.05 # hold when more than 5% of pairs were dropped
max_candidate_down_s: 300.0  # kill when the candidate route is down (refusing
                        # connections, its calls skipped) for longer than 5 minutes
max_cohort_imbalance: 0.1  # hold when a cohort's share is 10% off its expected share
auto_kill: true         # a kill verdict flips the kill switch
sandbox: bwrap          # how the task evaluator contains code: bwrap | unsafe-local
evaluators: null        # which evaluators run; null: all built-ins with their defaults.
                        # A list of names or {name, options} entries, or name -> options:
                        # [schema, {name: task, options: {timeout_s: 5}}]
"""
