"""The transformers backend: the exact reference, in fp32 on CPU.

The GGUF is dequantised into a Hugging Face Llama model, and decoding is written out by
hand (`gate.engines.decode`) so the plain and the speculative runs differ only by the draft:
their greedy outputs are the same token for token. Structured output (`response_format`) is
not enforced here; llama.cpp's grammar does that on the default backend. Every emitted token,
an accepted draft too, gets one `logprobs` entry: `raw` from the logits at temperature 1, or
`processed` from the distribution the request samples (`--logprobs-mode`, as vLLM's).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from gate.engines.base import CacheUse, Emit, GenerationResult, GenRequest
from gate.engines.decode import (
    LOGPROBS_MODES,
    VERIFIERS,
    Sampler,
    TokenLogprobs,
    decode_steps,
)
from gate.engines.model import TRANSFORMERS_INSTALL, require
from gate.engines.ngram import NgramDrafter
from gate.engines.spec import NgramConfig, SpecStats
from gate.errors import BadRequest


class TransformersBackend:
    """SmolLM2 through transformers and torch (CPU, fp32)."""

    name = "transformers"
    slots = 1

    def __init__(
        self,
        gguf: Path,
        *,
        spec: NgramConfig | None,
        threads: int = 1,
        verify: str = "exact",
        logprobs_mode: str = "raw",
    ) -> None:
        _check(verify, logprobs_mode)
        # Fault injection only: a wrong verifier (`biased-argmax`, ...) is never a default.
        self.verify = verify
        self.logprobs_mode = logprobs_mode
        # Everything comes from the local GGUF; never reach for a model hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF dequantisation progress bar
        self.torch = require("torch", TRANSFORMERS_INSTALL)
        require("gguf", TRANSFORMERS_INSTALL)
        transformers = require("transformers", TRANSFORMERS_INSTALL)
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.torch.set_num_threads(threads)
        self.spec = spec
        where, name = str(gguf.parent), gguf.name
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            where, gguf_file=name, dtype=self.torch.float32
        )
        self.model = model.eval()
        self.context = int(getattr(model.config, "max_position_embeddings", 2048))
        self.cache = CacheUse(self.context)
        self.eos = _eos_ids(self.tokenizer, model)

    def with_spec(
        self, spec: NgramConfig | None, verify: str = "exact", logprobs_mode: str = "raw"
    ) -> TransformersBackend:
        """Return a backend sharing these weights with other speculative and logprobs settings."""
        _check(verify, logprobs_mode)
        twin = copy.copy(self)
        twin.spec, twin.verify, twin.logprobs_mode = spec, verify, logprobs_mode
        twin.cache = CacheUse(self.context)  # its own requests, in its own engine
        return twin

    def prompt_ids(self, request: GenRequest) -> list[int]:
        """Return the prompt's token ids (the chat template applied for chat requests)."""
        text = request.prompt
        if request.chat:
            text = self.tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, tokenize=False
            )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, request: GenRequest, emit: Emit) -> GenerationResult:
        """Decode one request, emitting text as it becomes final."""
        prompt = self.prompt_ids(request)
        if len(prompt) + request.max_tokens > self.context:
            raise BadRequest(f"prompt plus max_tokens exceeds the {self.context}-token context")
        k = self.spec.num_speculative_tokens if self.spec else 0
        stats = SpecStats(k) if self.spec else None
        drafter = None
        if self.spec is not None:
            spec = self.spec
            drafter = NgramDrafter(
                prompt, n_min=spec.prompt_lookup_min, n_max=spec.prompt_lookup_max
            )
        recorder = self._recorder(request)
        steps = decode_steps(
            self.model,
            self.torch,
            prompt,
            sampler=self._sampler(request),
            max_tokens=request.max_tokens,
            drafter=drafter,
            k=k,
            stats=stats,
            logprobs=recorder,
        )
        text = _Text(self.tokenizer, request.stop)
        tokens: list[int] = []
        entries = None if recorder is None else _Entries(self.tokenizer, recorder, tokens)
        key = id(tokens)

        def held(delta: dict[str, Any]) -> bool:
            self.cache.hold(key, len(prompt) + len(tokens))
            return emit(delta)

        self.cache.hold(key, len(prompt))
        try:
            finish = _consume(steps, tokens, text, self.eos, request.max_tokens, held, entries)
        finally:
            self.cache.release(key)
        outcome = GenerationResult(text.final, [], finish, len(prompt), len(tokens), stats)
        if entries is not None:
            outcome.logprobs = entries.all()
        return outcome

    def _recorder(self, request: GenRequest) -> TokenLogprobs | None:
        if not request.logprobs:
            return None
        return TokenLogprobs(
            self.torch,
            request.top_logprobs,
            mode=self.logprobs_mode,
            temperature=request.temperature,
            top_p=request.top_p,
        )

    def _sampler(self, request: GenRequest) -> Sampler:
        generator = None
        if not request.greedy:
            generator = self.torch.Generator()
            if request.seed is None:
                generator.seed()
            else:
                generator.manual_seed(request.seed)
        return Sampler(self.torch, request.temperature, request.top_p, generator, self.verify)


def _check(verify: str, logprobs_mode: str) -> None:
    if verify not in VERIFIERS:
        raise ValueError(f"verify must be one of {', '.join(VERIFIERS)}")
    if logprobs_mode not in LOGPROBS_MODES:
        raise ValueError(f"logprobs_mode must be one of {', '.join(LOGPROBS_MODES)}")


class _Entries:
    """The OpenAI chat `logprobs.content` entries of the answer's tokens, in order."""

    def __init__(self, tokenizer: Any, recorder: TokenLogprobs, tokens: list[int]) -> None:
        self.tokenizer, self.recorder, self.tokens = tokenizer, recorder, tokens
        self.sent = 0

    def entry(self, token: int, logprob: float) -> dict[str, Any]:
        """Return one token's entry (its text, log-probability and UTF-8 bytes)."""
        piece = self.tokenizer.decode([token], clean_up_tokenization_spaces=False)
        return {"token": piece, "logprob": logprob, "bytes": list(piece.encode("utf-8"))}

    def _make(self, start: int, end: int) -> list[dict[str, Any]]:
        recorded = self.recorder.entries or []
        out = []
        for token, logprob, best in recorded[start:end]:
            item = self.entry(token, logprob)
            item["top_logprobs"] = [self.entry(t, lp) for t, lp in best]
            out.append(item)
        return out

    def fresh(self) -> list[dict[str, Any]]:
        """Return the entries not sent yet (streaming: with the delta that carries them)."""
        out = self._make(self.sent, len(self.tokens))
        self.sent = len(self.tokens)
        return out

    def all(self) -> list[dict[str, Any]]:
        """Return the entries of every token of the answer."""
        return self._make(0, len(self.tokens))


def _consume(
    steps: Any,
    tokens: list[int],
    text: _Text,
    eos: set[int],
    limit: int,
    emit: Emit,
    entries: _Entries | None = None,
) -> str:
    """Take the steps' tokens until EOS, a stop string, the limit or the client's leaving."""
    try:
        for produced in steps:
            finish = None
            for token in produced:
                if token in eos:
                    finish = "stop"
                    break
                tokens.append(token)
                if len(tokens) >= limit:
                    finish = "length"
                    break
            piece, stopped = text.update(tokens, final=finish is not None)
            delta: dict[str, Any] = {"content": piece}
            ending = stopped or finish is not None
            if entries is not None and (piece or ending) and entries.sent < len(tokens):
                delta["logprobs"] = entries.fresh()  # the last ones may carry no new text
            if (piece or "logprobs" in delta) and not emit(delta):
                return "abort"
            if stopped:
                return "stop"
            if finish is not None:
                return finish
    finally:
        steps.close()
    return "stop"


class _Text:
    """Incremental detokenisation that holds back what a stop string might still claim."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.final = ""

    def update(self, tokens: list[int], *, final: bool) -> tuple[str, bool]:
        """Return the newly final text and whether a stop string ended the answer."""
        text = self.tokenizer.decode(
            tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        found = (text.find(s, max(0, len(self.final) - len(s))) for s in self.stop)
        hits = [i for i in found if i >= 0]
        if hits:
            return self._advance(text[: min(hits)]), True
        safe = len(text) if final else len(text.rstrip("\ufffd"))  # a split UTF-8 character
        if not final:
            safe -= _stop_prefix(text[:safe], self.stop)
        return self._advance(text[:safe]), False

    def _advance(self, text: str) -> str:
        piece = text[len(self.final) :]
        self.final = text
        return piece


def _stop_prefix(text: str, stops: tuple[str, ...]) -> int:
    """Return the length of the longest tail of `text` that begins a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest


def _eos_ids(tokenizer: Any, model: Any) -> set[int]:
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return {int(i) for i in ids if i is not None}
