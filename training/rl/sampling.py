"""A completion's random draws come from (seed, the prompt's sample id, the completion's index in its
group, the step, and for an agent's later turns the turn) and nothing else: not the rank, the batch it was generated in, or how many ranks
there are. Each completion gets its own generator, and the next token is drawn from it alone, so a
rollout at 1, 2 or 3 ranks draws the same numbers for the same completion."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0: greedy (evaluation)
    top_p: float = 1.0  # the smallest set of tokens whose probability reaches top_p
    top_k: int = -1  # the k most likely tokens; -1 or 0: all
    max_new_tokens: int = 1024
    stop_token_ids: tuple[int, ...] = ()  # EOS and the chat template's end-of-turn tokens
    log_probs: bool = False  # return each drawn token's log-probability (untempered): the rollout correction's

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def completion_seed(seed: int, sample_id: int, generation: int, step: int, turn: int = 0) -> int:
    """A 63-bit seed of its own for each completion (each turn of an agent's): a hash, so neighbouring
    ids share no stream. A first turn's seed is a single-turn completion's."""
    coordinates = f"{seed}/{sample_id}/{generation}/{step}" + (f"/{turn}" if turn else "")
    digest = hashlib.blake2b(coordinates.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def completion_generator(seed: int, sample_id: int, generation: int, step: int, turn: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(completion_seed(seed, sample_id, generation, step, turn))


def filtered_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """[rows, vocab] logits at the temperature, with the tokens outside top_k and top_p at -inf."""
    logits = logits.float() / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        outside = probs.cumsum(dim=-1) - probs >= params.top_p  # the mass before a token already reaches top_p
        logits = logits.scatter(-1, order, ordered.masked_fill(outside, float("-inf")))
    return logits


def next_tokens(logits: torch.Tensor, params: SamplingParams, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of [rows, vocab] `logits`, row i drawn with `generators[i]` (on the host:
    the same draws on any device)."""
    if params.greedy:
        return logits.argmax(dim=-1)
    probs = torch.softmax(filtered_logits(logits, params), dim=-1).cpu()
    drawn = [torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(generators)]
    return torch.cat(drawn).to(logits.device)
