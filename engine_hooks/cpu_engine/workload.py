"""A deterministic workload that exercises the mamba prefix cache.

Requests come in waves; each wave is one `Engine.generate` call with several prompts, so its
requests run concurrently (shared prefill batches, interleaved decodes). The mix covers what
the cache must get right: shared system prefixes, multi-turn conversations whose previous
output becomes the next prefix, branches cut from the middle of an earlier prompt (unaligned
with pages and chunks), long prompts that go through chunked prefill, and a stream of unrelated
prompts that fills the pools and forces evictions, packed pairs that share one prefill
batch at an offset that is not a multiple of the 64-token state chunk, and few-shot questions
(a cached system prompt, a few new tokens, a long answer) whose short suffix after the hit
reaches no checkpoint while the answer crosses one. Everything derives from the seed, and
the same workload serves every model family.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

FIRST_TOKEN = 3
"""Token ids below this are bos/eos/pad in the tiny model and never appear in prompts."""

KINDS = ("shared-prefix", "multi-turn", "branch", "chunked", "pressure", "packed", "few-shot")
"""Request kinds, in the order the workload cycles through them."""


@dataclass(frozen=True)
class RequestSpec:
    """One prompt to send: token ids, how many tokens to generate, and why it exists."""

    input_ids: list[int]
    max_new_tokens: int
    kind: str


@dataclass(frozen=True)
class WorkloadShape:
    """Size knobs; defaults suit the tiny CPU engine (a few hundred tokens per request)."""

    vocab_size: int = 512
    system_prompt_len: int = 72
    system_prompts: int = 3
    wave_size: int = 4
    max_new_tokens: int = 12
    chunked_prompt_len: int = 300
    max_context: int = 1024
    # Packed prompt lengths: a short and a long one fit one 128-token prefill chunk together.
    packed_short_len: tuple[int, int] = (17, 47)
    packed_long_len: tuple[int, int] = (65, 80)
    # A few-shot answer long enough to cross the next 64-token checkpoint after the prompt.
    few_shot_answer_len: int = 64


@dataclass
class Workload:
    """Yields waves of requests; results of a wave feed the multi-turn and branch requests."""

    seed: int
    total_requests: int
    shape: WorkloadShape = field(default_factory=WorkloadShape)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._system_prompts = [self._tokens(self.shape.system_prompt_len) for _ in range(self.shape.system_prompts)]
        self._history: list[list[int]] = []  # full conversations so far: prompt + output
        self._issued = 0

    def waves(self) -> Iterator[list[RequestSpec]]:
        """Yield waves until `total_requests` are issued; call `record` between waves."""
        kind_index = 0
        while self._issued < self.total_requests:
            kind = KINDS[kind_index % len(KINDS)]
            kind_index += 1
            count = min(self.shape.wave_size, self.total_requests - self._issued)
            wave = [self._make(kind, index) for index in range(count)]
            self._issued += len(wave)
            yield wave

    def record(self, wave: list[RequestSpec], output_ids: list[list[int]]) -> None:
        """Remember what the engine answered, for later multi-turn and branch requests."""
        for spec, out in zip(wave, output_ids, strict=True):
            self._history.append(spec.input_ids + out)

    def _make(self, kind: str, index: int) -> RequestSpec:
        shape = self.shape
        max_new_tokens = shape.max_new_tokens
        if kind == "few-shot":
            # As in #29330: a hit on a shared prompt, a suffix too short to reach a checkpoint
            # (nothing tracked while prefilling it), then an answer that crosses one.
            prompt = self._rng.choice(self._system_prompts) + self._tokens(self._rng.randint(3, 17))
            max_new_tokens = shape.few_shot_answer_len
        elif kind == "packed":
            # Alternately short and long fresh prompts, sent together: the long one shares a
            # prefill batch with the short one before it, so the state it checkpoints (after
            # 64 tokens) sits at an unaligned offset of the flattened batch.
            low, high = shape.packed_long_len if index % 2 else shape.packed_short_len
            prompt = self._tokens(self._rng.randint(low, high))
        elif kind == "multi-turn" and self._history:
            prompt = self._rng.choice(self._history) + self._tokens(self._rng.randint(3, 17))
        elif kind == "branch" and self._history:
            source = self._rng.choice(self._history)
            cut = self._rng.randint(len(source) // 3, max(len(source) // 3, len(source) - 1))
            prompt = source[:cut] + self._tokens(self._rng.randint(1, 9))
        elif kind == "chunked":
            prompt = self._rng.choice(self._system_prompts) + self._tokens(shape.chunked_prompt_len)
        elif kind == "pressure":
            prompt = self._tokens(self._rng.randint(40, 160))
        else:  # shared-prefix, and the fallback before any history exists
            kind = "shared-prefix"
            prompt = self._rng.choice(self._system_prompts) + self._tokens(self._rng.randint(1, 23))
        prompt = prompt[-(shape.max_context - max_new_tokens) :]
        return RequestSpec(input_ids=prompt, max_new_tokens=max_new_tokens, kind=kind)

    def _tokens(self, n: int) -> list[int]:
        return [self._rng.randrange(FIRST_TOKEN, self.shape.vocab_size) for _ in range(n)]
